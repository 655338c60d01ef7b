"""What the kernel answers in the tools tests that ``--quick`` runs on the scripted kernel.

Each reply is what ipykernel sends for that code (see ``tests.scripted``); the full run runs
the same tests on real kernels, so a reply that drifts from ipykernel's fails there. A test
that is not listed here runs on real kernels only (``--quick`` leaves it out).
"""

from __future__ import annotations

from tests.scripted import (
    Call,
    Script,
    error,
    out,
    result,
    runs,
    sleep,
    touch,
    until_interrupt,
)

SLEEP_FOREVER = "import time\nopen('running', 'w').close()\ntime.sleep(3600)"
TICKS = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.5)"
UNTIL_GO = (
    "import os, time\nprint('loading data', flush=True)\n"
    "while not os.path.exists('go'):\n    print('.', end='', flush=True)\n    time.sleep(0.5)\n"
    "print('done')"
)
FLOOD = "print('\\n'.join(f'line {i}' for i in range(50_000)))"


async def until_go(call: Call) -> None:
    """The cell of the progress test: prints dots until the test creates ``go``."""
    call.stream("loading data\n")
    while not (call.cwd / "go").exists():
        call.stream(".")
        await call.pause(0.5)
    call.stream("done\n")


SCRIPTS: dict[str, Script] = {
    "test_execution.py::test_execute_runs_cells_by_index_id_and_range_and_saves_outputs": Script(
        {
            "x = 20": [],
            "x + 1": [result("21")],
            "print(x * 2)": [out("40\n")],
            "x + 3": [result("23")],
        }
    ),
    "test_execution.py::test_every_cell_runs_when_asked_for": Script(
        {"x = 20": [], "x + 1": [result("21")]}
    ),
    "test_execution.py::test_stop_on_error_skips_the_cells_after_the_failing_one": Script(
        {
            "1/0": [error("ZeroDivisionError", "division by zero", "1/0")],
            "print('never')": [out("never\n")],
        }
    ),
    "test_execution.py::test_scratch_code_runs_in_the_kernel_without_changing_the_notebook": (
        Script({"y = 5": [], "print(y * 3)": [out("15\n")]})
    ),
    "test_execution.py::test_a_long_run_returns_a_handle_then_polls_show_only_new_output": Script(
        {
            TICKS: [
                step
                for i in range(4)
                for step in (out(f"tick {i}\n"), sleep(0.5))  # print, then sleep
            ]
        }
    ),
    "test_execution.py::test_progress_notifications_carry_what_the_cell_printed": Script(
        {UNTIL_GO: [until_go]}
    ),
    "test_execution.py::test_cancel_execution_interrupts_the_running_cell": Script(
        {
            SLEEP_FOREVER: [touch("running"), until_interrupt()],
            "print('after')": [out("after\n")],
            "'alive'": [result("'alive'")],
        }
    ),
    "test_execution.py::test_cancelling_the_request_interrupts_the_kernel": Script(
        {SLEEP_FOREVER: [touch("running"), until_interrupt()], "1 + 1": [result("2")]}
    ),
    "test_execution.py::test_a_timeout_says_what_happened_in_plain_words": Script(
        {"n = 3": [], "while True: n += 1": [until_interrupt()]}
    ),
    "test_execution.py::test_insert_and_edit_can_run_the_cell": Script(
        {
            "a * 10": runs(
                [error("NameError", "name 'a' is not defined", "a * 10")], [result("30")]
            ),
            "a = 3": [],
        }
    ),
    "test_execution.py::test_one_flood_does_not_starve_the_outputs_of_later_cells": Script(
        {
            FLOOD: [out("\n".join(f"line {i}" for i in range(50_000)) + "\n")],
            **{f"print('cell {i} ok')": [out(f"cell {i} ok\n")] for i in range(1, 21)},
        }
    ),
    "test_execution.py::test_edit_and_run_returns_one_current_version": Script(
        {"a = 3": [], "a + 1": [result("4")]}
    ),
    "test_execution.py::test_interrupt_and_cancel_report_the_same_status": Script(
        {"import time\ntime.sleep(60)": [until_interrupt()], "print('after')": [out("after\n")]}
    ),
    "test_execution.py::test_a_run_waiting_for_a_busy_kernel_is_queued_and_says_behind_what": (
        Script(
            {
                "import time\ntime.sleep(4)\nprint('first')": [sleep(4), out("first\n")],
                "print('second')": [out("second\n")],
            }
        )
    ),
    "test_old_notebooks.py::test_running_an_old_notebook_saves_its_outputs": Script(
        {"n = 1\nprint(n)": [out("1\n")], "for i in range(1, 4):\n    n *= i\nn": [result("6")]}
    ),
    "test_notebook_metadata.py::test_switching_the_kernel_restarts_it_and_says_variables_were_lost": (
        Script(
            {"x = 41": [], "x": [error("NameError", "name 'x' is not defined", "x")]},
            kernelspecs={"python3": "python", "deno": "typescript"},
        )
    ),
}

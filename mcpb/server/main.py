"""The bundle's entry point: nbrelay's MCP server over stdio in file mode, serving the notebooks
of the folder the user chose when installing the extension ($NBRELAY_ROOT, set from the
manifest's user_config)."""

import sys

from nbrelay.cli import main

if __name__ == "__main__":
    sys.argv[1:1] = ["serve"]
    sys.exit(main())

"""The pure notebook core: model, addressing, edits, history, validation, rendering."""

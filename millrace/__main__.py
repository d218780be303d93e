"""``python -m millrace ...`` is the ``millrace`` command."""

from millrace.gateway.commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

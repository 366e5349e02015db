"""`chakra_trace_link` (placeholder until the command is built)."""

import sys

from chakra.cli.common import not_built

main = not_built("chakra_trace_link")

if __name__ == "__main__":
    sys.exit(main())

"""`chakra_converter` (placeholder until the command is built)."""

import sys

from chakra.cli.common import not_built

main = not_built("chakra_converter")

if __name__ == "__main__":
    sys.exit(main())

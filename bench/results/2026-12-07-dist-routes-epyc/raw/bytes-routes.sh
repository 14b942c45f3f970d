#!/bin/bash
# ab-routes.sh with fewer iterations: the bytes per iteration do not change with them.
CP_ITERS=2 APR_ITERS=1 exec "$(dirname "$0")/ab-routes.sh" "$@"

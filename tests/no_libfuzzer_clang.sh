#!/bin/sh
# A clang++ without libclang-rt-14-dev, for the test libfuzzer_runtime_required: asked for a runtime
# file it does not have, clang prints its bare name back, as this does.
case "$1" in
  -print-file-name=*) echo "${1#-print-file-name=}" ;;
  *) exit 1 ;;
esac

#!/bin/sh
# Build a pylmq release: rel/build.sh PYTHON TARGET_DIR   (`make rel` runs it)
#
# TARGET_DIR gets bin/lmq and bin/lmq-admin (launchers bound to PYTHON, the absolute path of
# the interpreter of a virtual environment where pylmq is installed), etc/vm.args and
# etc/app.config (copied from the repository's etc/ only when absent, so that a rebuild keeps
# an operator's edits), and empty log/ and data/.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 PYTHON TARGET_DIR" >&2
    exit 2
fi
PYTHON=$1
TARGET=$2
case "$PYTHON" in
    /*) ;;
    *) echo "rel/build.sh: PYTHON must be an absolute path, got $PYTHON" >&2; exit 2 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd -P)
REPO=$(dirname "$HERE")
"$PYTHON" -c 'import pylmq.cli.lmq, pylmq.cli.admin' || {
    echo "rel/build.sh: $PYTHON cannot import pylmq (run make deps first)" >&2
    exit 1
}
mkdir -p "$TARGET/bin" "$TARGET/etc" "$TARGET/log" "$TARGET/data"
for f in vm.args app.config; do
    [ -e "$TARGET/etc/$f" ] || cp "$REPO/etc/$f" "$TARGET/etc/$f"
done
for pair in lmq:pylmq.cli.lmq lmq-admin:pylmq.cli.admin; do
    name=${pair%%:*}
    module=${pair#*:}
    sed -e "s|@PYTHON@|$PYTHON|g" -e "s|@MODULE@|$module|g" -e "s|@NAME@|$name|g" "$HERE/files/lmq.in" > "$TARGET/bin/$name.tmp"
    chmod 755 "$TARGET/bin/$name.tmp"
    mv "$TARGET/bin/$name.tmp" "$TARGET/bin/$name"
done
echo "release built in $TARGET (python: $PYTHON)"

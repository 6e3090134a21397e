#!/usr/bin/env python3
"""Let kind's node entrypoint run without --privileged (see hack/kind.sh: the docker shim).

On a host whose capability bounding set lacks CAP_SYS_RESOURCE, `docker run --privileged`
fails, so the shim starts nodes with every other capability and sets KIND_UNPRIVILEGED=1.
/sys and the cgroup v1 controllers are then mounted read-only; this inserts a step that
bind-remounts them read-write before kind's own checks (a plain remount,rw fails: busy).

    patch-entrypoint.py ROOTFS/usr/local/bin/entrypoint
"""

import sys
from pathlib import Path

MARKER = "# validate state\nvalidate_userns\n"
STEP = """# kcp-shard-operator: started without --privileged (host lacks CAP_SYS_RESOURCE):
# /sys and the cgroup controllers are read-only; remount them read-write.
remount_sys_rw() {
  mount -o remount,rw /sys || log_warn "remount /sys rw failed"
  local m
  for m in $(findmnt -lun -o target -t cgroup,cgroup2); do
    mount -o remount,bind,rw "$m" || log_warn "remount $m rw failed"
  done
}
if [[ -n "${KIND_UNPRIVILEGED:-}" ]]; then remount_sys_rw; fi

"""

path = Path(sys.argv[1])
text = path.read_text()
if "remount_sys_rw" not in text:
    if MARKER not in text:
        sys.exit(f"{path}: kind's entrypoint changed, no '{MARKER.splitlines()[0]}' to patch")
    path.write_text(text.replace(MARKER, STEP + MARKER))

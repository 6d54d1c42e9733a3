"""The sandbox's seccomp profile: podman's default, with no way to set a setuid or setgid bit.

What the agent creates in its rw mounts is a file on the host's filesystem, owned by the agent's
uid there (you rootless; the tree's owner as root, idmapped: root on a root-owned workspace).  The
owner of a file may always set its setuid bit, and no mount option inside changes what the host
does when it later runs that file, so the bits must never be set.  As systemd's
``RestrictSUIDSGID=`` does, the profile refuses (EPERM) every call that would set S_ISUID or
S_ISGID on a file: ``chmod``/``fchmod``/``fchmodat`` with either bit, and ``open``/``openat``/
``creat``/``mknod``/``mknodat`` creating a file with either bit in its mode.  ``openat2`` and
``fchmodat2`` carry the mode where a filter cannot see it (in a struct) or are newer than the
profile: they are not allowed (ENOSYS, and the C library falls back to ``openat``/``fchmodat``).
Directories may still be made setgid (``mkdir``): that grants nothing on the host.

The capabilities that would get around it (CAP_FSETID keeps the bits on a write, CAP_SETFCAP
writes file capabilities, CAP_CHOWN/CAP_FOWNER reach other owners' files) are dropped
(``podman.build_argv``: ``--cap-drop=all``).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from ..core.errors import ChtopError

# where podman's packages install the default profile (containers-common)
DEFAULT_PROFILES = (Path("/usr/share/containers/seccomp.json"), Path("/etc/containers/seccomp.json"))
EPERM = 1
SETID_BITS = stat.S_ISUID | stat.S_ISGID
O_CREAT = 0o100            # the same on x86_64 and aarch64
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE (O_TMPFILE is it plus O_DIRECTORY)
# the syscalls that set a file's mode: name -> index of the mode argument
MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "creat": 1, "mknod": 1, "mknodat": 2}
# the ones that create only with O_CREAT or O_TMPFILE: name -> (flags index, mode index)
OPEN_ARGS = {"open": (1, 2), "openat": (2, 3)}
NOT_ALLOWED = ("openat2", "fchmodat2")


def _masked(index: int, mask: int, value: int) -> dict:
    """(arg[index] & mask) == value"""
    return {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}


def _rule(name: str, action: str, *args: dict) -> dict:
    rule = {"names": [name], "action": action, "args": list(args)}
    if action == "SCMP_ACT_ERRNO":
        rule["errnoRet"] = EPERM
    return rule


def _mode_rules(name: str, index: int) -> list[dict]:
    return [_rule(name, "SCMP_ACT_ALLOW", _masked(index, SETID_BITS, 0)),
            *(_rule(name, "SCMP_ACT_ERRNO", _masked(index, bit, bit)) for bit in (stat.S_ISUID, stat.S_ISGID))]


def _open_rules(name: str, flags: int, mode: int) -> list[dict]:
    creating = (O_CREAT, O_TMPFILE_BIT)
    return [_rule(name, "SCMP_ACT_ALLOW", _masked(flags, O_CREAT | O_TMPFILE_BIT, 0)),
            _rule(name, "SCMP_ACT_ALLOW", _masked(mode, SETID_BITS, 0)),
            *(_rule(name, "SCMP_ACT_ERRNO", _masked(flags, how, how), _masked(mode, bit, bit))
              for how in creating for bit in (stat.S_ISUID, stat.S_ISGID))]


def no_setid_profile(default: dict) -> dict:
    """``default`` (podman's profile) with the mode-setting syscalls allowed only without the
    setuid/setgid bits, and ``openat2``/``fchmodat2`` left to its default action."""
    if default.get("defaultAction") == "SCMP_ACT_ALLOW":
        raise ChtopError("podman's default seccomp profile allows every syscall by default; chtop cannot "
                         "restrict setuid/setgid bits on top of it")
    profile = dict(default)   # its rules are replaced by new ones below, never changed in place
    filtered = set(MODE_ARG) | set(OPEN_ARGS) | set(NOT_ALLOWED)
    kept = []
    for rule in profile.get("syscalls") or []:
        names = [n for n in rule.get("names") or [] if n not in filtered]
        if names or not rule.get("names"):
            kept.append(dict(rule, names=names) if rule.get("names") else rule)
    for name, index in MODE_ARG.items():
        kept += _mode_rules(name, index)
    for name, (flags, mode) in OPEN_ARGS.items():
        kept += _open_rules(name, flags, mode)
    profile["syscalls"] = kept
    return profile


def default_profile() -> dict:
    """podman's default profile, read from where containers-common installs it."""
    for path in DEFAULT_PROFILES:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            raise ChtopError(f"cannot read podman's seccomp profile {path}: {exc}") from None
    raise ChtopError(f"podman's default seccomp profile is not installed (none of "
                     f"{', '.join(map(str, DEFAULT_PROFILES))}); the sandbox refuses to start without it. "
                     "Install it: apt-get install golang-github-containers-common")


def write_profile(path: Path) -> None:
    """The sandbox's profile at ``path`` (a host-owned file the container never sees)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(profile_text())
    tmp.replace(path)


def profile_text() -> str:
    """The sandbox's profile as JSON: podman's default as installed now, set-id modes refused."""
    return json.dumps(no_setid_profile(default_profile()))

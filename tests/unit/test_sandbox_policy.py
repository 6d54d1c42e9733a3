"""The sandbox/ policy files: formats, expansion, and errors that name file:line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chtop_tasks.core.errors import ChtopError, PolicyError
from chtop_tasks.sandbox.policy import STRUCTURAL_ENV, load_policy, parse_devices, parse_env_allow, parse_fs_allow


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    (h / ".config" / "git").mkdir(parents=True)
    (h / ".gitconfig").write_text("")
    (h / "data1").mkdir()
    (h / "data2").mkdir()
    return h


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_fs_allow_modes_expansion_globs_and_absent(tmp_path, home):
    ch = tmp_path / "ch"
    (ch / "extern").mkdir(parents=True)
    f = write(tmp_path / "fs-allow.txt",
              "# comment\n\nro ~/.gitconfig   # trailing comment\nrw $HOME/data*\nro ${CH}/extern\n"
              "ro ~/absent\nrw /usr/share/doc\n")
    rules = parse_fs_allow(f, home, ch)
    assert [(r.mode, r.pattern) for r in rules] == [
        ("ro", "~/.gitconfig"), ("rw", "$HOME/data*"), ("ro", "${CH}/extern"), ("ro", "~/absent"),
        ("rw", "/usr/share/doc")]
    assert rules[0].paths == (home / ".gitconfig",)
    assert rules[1].paths == (home / "data1", home / "data2")
    assert rules[2].paths == (ch / "extern",)
    assert rules[3].paths == ()                       # absent: skipped
    assert rules[0].where == f"{f}:3"


@pytest.mark.parametrize("line, why", [
    ("rx ~/x", "expected 'ro PATH' or 'rw PATH'"),
    ("ro", "expected 'ro PATH' or 'rw PATH'"),
    ("ro relative/path", "must be absolute"),
    ("ro $SECRET_DIR/x", "unknown variable $SECRET_DIR"),
    ("ro ~bob/x", "'~user' paths are not supported"),
    ("ro /a /b", "one path per line"),
])
def test_fs_allow_malformed_line_names_file_and_line(tmp_path, home, line, why):
    f = write(tmp_path / "fs-allow.txt", "ro ~/.gitconfig\n" + line + "\n")
    with pytest.raises(PolicyError) as exc:
        parse_fs_allow(f, home, tmp_path)
    assert f"{f}:2:" in str(exc.value) and why in str(exc.value)


def test_missing_fs_allow_refuses(tmp_path, home):
    with pytest.raises(PolicyError, match="fs-allow.txt is missing"):
        load_policy(tmp_path, home, None)


def test_ch_is_undefined_in_dir_mode(tmp_path, home):
    f = write(tmp_path / "fs-allow.txt", "ro $CH/extern\n")
    with pytest.raises(PolicyError, match="CH is not defined"):
        parse_fs_allow(f, home, None)


def test_devices_only_existing_character_devices(tmp_path):
    (tmp_path / "regular").write_text("x")
    f = write(tmp_path / "devices.txt", f"/dev/null\n/dev/nvidia*\n{tmp_path}/regular\n/dev/zer?\n")
    devices, warnings = parse_devices(f)
    assert devices == [Path("/dev/null"), Path("/dev/zero")]
    assert len(warnings) == 1 and "regular is not a character device" in warnings[0]
    assert f"{f}:3" in warnings[0]
    with pytest.raises(PolicyError, match=f"{f}:1"):
        parse_devices(write(f, "nvidia0\n"))
    assert parse_devices(tmp_path / "absent.txt") == ([], [])


def test_env_allow_reserved_and_invalid_names_warn(tmp_path):
    f = write(tmp_path / "env-allow.txt", "EDITOR\nLC_*\nPATH\nHTTPS_PROXY\n9BAD\nBAD-NAME\nEDITOR\n")
    names, warnings = parse_env_allow(f)
    assert names == ["EDITOR", "LC_*"]
    assert any(f"{f}:3" in w and "structural" in w for w in warnings)
    assert any(f"{f}:4" in w and "structural" in w for w in warnings)
    assert any(f"{f}:5" in w and "not a valid variable name" in w for w in warnings)
    assert any(f"{f}:6" in w for w in warnings)
    with pytest.raises(PolicyError, match=f"{f}:1"):
        parse_env_allow(write(f, "EDITOR VISUAL\n"))


def test_env_from_forwards_only_allowlisted_non_structural(tmp_path, home):
    write(tmp_path / "fs-allow.txt", "")
    write(tmp_path / "env-allow.txt", "EDITOR\nLC_*\nTERM\n")
    policy = load_policy(tmp_path, home, None)
    env = {"EDITOR": "vim", "LC_ALL": "C", "LC_TIME": "C", "TERM": "xterm", "AWS_SECRET_ACCESS_KEY": "k",
           "PATH": "/evil", "SSH_AUTH_SOCK": "/tmp/s"}
    assert policy.env_from(env) == {"EDITOR": "vim", "LC_ALL": "C", "LC_TIME": "C", "TERM": "xterm"}
    # a glob that would catch structural names never does
    write(tmp_path / "env-allow.txt", "*\n")
    assert "PATH" not in load_policy(tmp_path, home, None).env_from(env)


def test_env_from_answers_as_fnmatch_for_names_prefixes_and_other_globs():
    """env_from matches plain names and ``X*`` prefixes without fnmatch (no regex compiled per
    launch); every pattern, split or not, answers as ``fnmatchcase`` does."""
    import fnmatch
    import itertools

    from chtop_tasks.sandbox.policy import SandboxPolicy

    patterns = ["EDITOR", "LC_*", "X?Y", "A[BC]*", "*", "TERM*", "**", "[*]", "Q\\*"]
    env = {k: "v" for k in ["EDITOR", "LC_ALL", "LC_", "XAY", "AB", "ACD", "TERM", "TERMINAL", "*", "Q\\Z",
                            "EDITORX", "lc_all", "PATH"]}
    for count in (1, 2, 3):
        for chosen in itertools.combinations(patterns, count):
            want = {k: "v" for k in sorted(env) if k not in STRUCTURAL_ENV
                    and any(fnmatch.fnmatchcase(k, p) for p in chosen)}
            assert SandboxPolicy(env_names=list(chosen)).env_from(env) == want, chosen


def test_shipped_policy_parses(home):
    shipped = Path(__file__).resolve().parents[2] / "sandbox"
    policy = load_policy(shipped, home, home)
    assert policy.fs and all(r.mode in ("ro", "rw") for r in policy.fs)
    assert {"EDITOR", "LANG", "LC_*", "TERM"} <= set(policy.env_names)
    assert not set(policy.env_names) & STRUCTURAL_ENV
    assert os.path.samefile(shipped, Path(__file__).resolve().parents[2] / "chtop_tasks" / "default_policy")


def test_a_policy_line_that_mounts_a_credential_store_is_warned_about(tmp_path, home):
    (home / ".config" / "git" / "credentials").write_text("https://u:tok@example.invalid\n")
    (home / ".config" / "git" / "ignore").write_text("*.o\n")
    (home / ".bashrc").write_text("export ANTHROPIC_API_KEY=x\n")
    policy = tmp_path / "policy"
    policy.mkdir()
    write(policy / "fs-allow.txt", "ro ~/.config/git/ignore\nro ~/.gitconfig\nro ~/.config\nro ~/.bashrc\nro ~/data1\n")
    warnings = load_policy(policy, home, None).warnings
    assert len(warnings) == 3, warnings               # not the ignore file, nor data1
    assert all("the agent can read them" in w for w in warnings)
    assert [w.split(": ", 1)[0].rsplit(":", 1)[1] for w in warnings] == ["2", "3", "4"]
    assert "can hold git's credential store" in warnings[1]


def test_the_sandbox_gitconfig_has_identity_and_preferences_only():
    from chtop_tasks.sandbox.gitconfig import sandbox_gitconfig

    text = sandbox_gitconfig({"user.name": 'A "Quoted" \\ Name', "user.email": "a@example.invalid",
                              "pull.rebase": "true", "credential.helper": "store",
                              "http.extraheader": "Authorization: Bearer tok"})
    assert "credential" not in text.split("\n", 2)[2] and "tok" not in text and "extraheader" not in text
    assert '[user]\n\tname = "A \\"Quoted\\" \\\\ Name"\n\temail = "a@example.invalid"\n' in text
    assert '[pull]\n\trebase = "true"\n' in text and '[commit]\n\tgpgsign = "false"\n' in text


def test_the_seccomp_profile_allows_mode_calls_only_without_setid_bits():
    """Pure, on podman's own default: no unconditional allow is left for a call that sets a mode,
    each has an allow without the bits and EPERM with either; openat2/fchmodat2 fall to the default."""
    from chtop_tasks.sandbox import seccomp

    default = {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "syscalls": [
        {"names": ["read", "chmod", "openat", "openat2", "mkdir"], "action": "SCMP_ACT_ALLOW", "args": []},
        {"names": ["fchmod"], "action": "SCMP_ACT_ALLOW", "args": []}]}
    profile = seccomp.no_setid_profile(default)
    rules = profile["syscalls"]
    assert rules[0]["names"] == ["read", "mkdir"] and default["syscalls"][0]["names"][1] == "chmod"   # a copy
    assert not any(r["names"] == ["fchmod"] and not r["args"] for r in rules)
    chmod = [r for r in rules if r["names"] == ["chmod"]]
    assert [(r["action"], r["args"][0]["value"], r["args"][0]["valueTwo"]) for r in chmod] == [
        ("SCMP_ACT_ALLOW", 0o6000, 0), ("SCMP_ACT_ERRNO", 0o4000, 0o4000), ("SCMP_ACT_ERRNO", 0o2000, 0o2000)]
    assert all(r.get("errnoRet") == 1 for r in rules if r["action"] == "SCMP_ACT_ERRNO")
    openat = [r for r in rules if r["names"] == ["openat"]]
    assert {a["index"] for r in openat for a in r["args"]} == {2, 3}      # flags and mode
    assert not any("openat2" in r["names"] for r in rules)
    with pytest.raises(ChtopError, match="allows every syscall"):
        seccomp.no_setid_profile({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})


def test_the_rendered_seccomp_profile_follows_a_change_of_podmans_default(tmp_path, monkeypatch):
    """The profile is podman's default as installed now: a new default (a package upgrade) is
    rendered as it is, and a removed one refuses."""
    import json

    from chtop_tasks.sandbox import seccomp

    default = tmp_path / "seccomp.json"
    monkeypatch.setattr(seccomp, "DEFAULT_PROFILES", (default, tmp_path / "etc-seccomp.json"))
    default.write_text(json.dumps({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": []}]}))
    first = json.loads(seccomp.profile_text())
    assert first["syscalls"][0]["names"] == ["read"]
    default.write_text(json.dumps({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["write", "chmod"], "action": "SCMP_ACT_ALLOW", "args": []}]}))
    assert json.loads(seccomp.profile_text())["syscalls"][0]["names"] == ["write"]
    default.unlink()
    with pytest.raises(ChtopError, match="not installed"):
        seccomp.profile_text()

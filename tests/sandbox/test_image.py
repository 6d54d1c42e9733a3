"""The local sandbox image: input hashing and rebuild on change (real podman)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from chtop_tasks.agents import image
from chtop_tasks.core import places
from chtop_tasks.core.errors import PolicyError
from chtop_tasks.workspace import targets

REPO = Path(__file__).resolve().parents[2]


def need_podman():
    if shutil.which("podman") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("podman is not installed (CI installs it)")
        pytest.skip("podman is not installed")


@pytest.fixture
def context(tmp_path):
    ctx = tmp_path / "containers"
    ctx.mkdir()
    (ctx / "Containerfile").write_text("ARG BASE=scratch\nFROM ${BASE}\nCOPY hello.txt /hello.txt\n")
    (ctx / "hello.txt").write_text("one\n")
    stamp = tmp_path / "stamp"
    stamp.write_text("pkgs v1\n")
    (ctx / "host-paths.txt").write_text(f"stamp {stamp}\n")
    return ctx


@pytest.fixture
def tag():
    name = f"localhost/chtop-test-{uuid.uuid4().hex[:10]}:latest"
    yield name
    subprocess.run(["podman", "rmi", "-f", name], capture_output=True)


def test_shipped_context_parses_and_hashes():
    assert image.CONTAINERS_DIR == REPO / "containers"            # what --image and sbox.build-image build
    assert image.image_trees() == (Path("/usr"), Path("/etc"))
    host = image.read_host_paths(REPO / "containers")
    assert Path("/usr") in host.copy and "etc/shadow*" in host.exclude
    assert "--exclude=etc/shadow*" in image.tar_argv(host)


def test_hash_changes_with_any_input(context, tmp_path):
    first = image.input_hash(context)
    assert image.input_hash(context) == first
    (context / "hello.txt").write_text("two\n")
    second = image.input_hash(context)
    assert second != first
    (tmp_path / "stamp").write_text("pkgs v2\n")
    assert image.input_hash(context) != second


def test_hash_follows_copied_trees(context, tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (context / "host-paths.txt").write_text(f"copy {tree}\n")
    before = image.input_hash(context)
    (tree / "sub" / "new-file").write_text("x")
    os.utime(tree / "sub", ns=(1, 1))  # make the change visible even on coarse clocks
    assert image.input_hash(context) != before


def test_an_image_launch_takes_the_image_as_root_and_binds_no_copied_tree(with_dev):
    from chtop_tasks.sandbox import launcher as launch
    from chtop_tasks.sandbox import podman
    from chtop_tasks.sandbox.mounts import plan_mounts
    from chtop_tasks.sandbox.policy import load_policy

    target = targets.target_for(with_dev.path("dev"))
    policy = load_policy(target.policy_dir, places.home_dir(), target.workspace.grouping)
    trees = image.image_trees(REPO / "containers")
    assert set(trees) == {Path("/usr"), Path("/etc")}
    mounts = plan_mounts(launch._mount_context(target, None, False, trees), policy.fs).mounts()
    assert not {Path("/usr"), Path("/etc")} & {m.dst for m in mounts}
    assert {Path("/usr"), Path("/etc")} <= {m.dst for m in plan_mounts(launch._mount_context(target, None, False),
                                                                      policy.fs).mounts()}
    argv = podman.build_argv(name="n", labels={}, mounts=mounts, skeleton=Path("/s/kel"), workdir=target.root,
                             env_values={}, env_names=[], devices=[], network="proxy", proxy_socket=None,
                             interactive=False, identity=podman.identity_for(target.root), hostname="h",
                             command=["claude"], image="localhost/chtop-sandbox:latest")
    assert "--rootfs" not in argv
    at = argv.index("localhost/chtop-sandbox:latest")
    assert argv[at - 1] == "--volume=/s/kel/.chtop:/.chtop:ro,nosuid,nodev" and argv[at + 1:at + 3] == ["/bin/sh", "/.chtop/entry.sh"]
    assert argv[-1] == "claude"


def test_bad_host_paths_line(context):
    (context / "host-paths.txt").write_text("copy relative/path\n")
    with pytest.raises(PolicyError, match="host-paths.txt:1"):
        image.read_host_paths(context)


@pytest.mark.podman
@pytest.mark.slow
def test_image_is_built_labelled_and_rebuilt_only_on_change(context, tmp_path, tag, capsys):
    need_podman()
    image.ensure_image(context, tag)
    assert "not built yet" in capsys.readouterr().err
    assert image.image_label(tag) == image.input_hash(context)
    ident = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", tag],
                           capture_output=True, text=True, check=True).stdout

    image.ensure_image(context, tag)
    assert "up to date" in capsys.readouterr().err

    (context / "hello.txt").write_text("changed\n")
    image.ensure_image(context, tag)
    assert "inputs changed" in capsys.readouterr().err
    assert image.image_label(tag) == image.input_hash(context)
    assert subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", tag],
                          capture_output=True, text=True, check=True).stdout != ident

    (tmp_path / "stamp").write_text("a package was upgraded\n")
    image.ensure_image(context, tag)
    assert "inputs changed" in capsys.readouterr().err


@pytest.mark.podman
@pytest.mark.slow
def test_host_files_are_imported_as_the_base(context, tmp_path, tag):
    need_podman()
    tree = tmp_path / "hosttree"
    tree.mkdir()
    (tree / "tool.txt").write_text("from the host\n")
    (tree / "secret.key").write_text("never\n")
    excluded = str(tree / "secret.key").lstrip("/")
    (context / "host-paths.txt").write_text(f"copy {tree}\nexclude {excluded}\n")
    (context / "Containerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY hello.txt /hello.txt\n")
    digest = image.input_hash(context)
    base_repo = f"localhost/chtop-test-base-{uuid.uuid4().hex[:10]}"
    image.ensure_image(context, tag, base_repo=base_repo)
    base = f"{base_repo}:{digest}"
    try:
        name = f"chtop-test-{uuid.uuid4().hex[:10]}"
        subprocess.run(["podman", "create", "--name", name, tag, "/x"], check=True, capture_output=True)
        try:
            listing = subprocess.run(f"podman export {name} | tar -t", shell=True, check=True,
                                     capture_output=True, text=True).stdout
        finally:
            subprocess.run(["podman", "rm", "-f", name], capture_output=True)
        rel = str(tree).lstrip("/")
        assert f"{rel}/tool.txt" in listing
        assert "hello.txt" in listing
        assert f"{rel}/secret.key" not in listing
    finally:
        subprocess.run(["podman", "rmi", "-f", tag, base], capture_output=True)

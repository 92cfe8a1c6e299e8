"""Group, users and the shared directory are set up as requested; bob kept his groups."""
import grp
import os
import pwd
import stat
import subprocess


def groups_of(user):
    return set(subprocess.run(["id", "-nG", user], capture_output=True, text=True, check=True).stdout.split())


def test_group():
    assert grp.getgrnam("analytics").gr_gid == 3100


def test_carol():
    carol = pwd.getpwnam("carol")
    assert carol.pw_dir == "/home/carol" and os.path.isdir("/home/carol")
    assert carol.pw_shell == "/bin/bash"
    assert "analytics" in groups_of("carol")


def test_bob_kept_groups():
    assert {"analytics", "users", "reporting", "bob"} <= groups_of("bob")


def test_directory():
    st = os.stat("/srv/analytics")
    assert st.st_uid == 0
    assert st.st_gid == 3100
    assert stat.S_IMODE(st.st_mode) == 0o2770


def test_existing_files_group():
    for root, dirs, files in os.walk("/srv/analytics"):
        for name in dirs + files:
            assert os.lstat(os.path.join(root, name)).st_gid == 3100, os.path.join(root, name)

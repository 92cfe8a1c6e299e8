"""The active jobs are exactly the expected ones; the cleanup job is kept as a comment."""
from pathlib import Path

LINES = Path("/app/crontab").read_text().splitlines()


def active_jobs():
    jobs = []
    for line in LINES:
        s = line.strip()
        if s and not s.startswith("#") and "=" not in s.split()[0]:
            fields = s.split(None, 5)
            jobs.append((" ".join(fields[:5]), fields[5]))
    return jobs


def test_active_jobs():
    assert sorted(active_jobs()) == sorted([
        ("30 1 * * *", "/usr/local/bin/backup.sh --full"),
        ("*/5 * * * *", "/usr/local/bin/collect-metrics.sh"),
        ("15 6 * * 1-5", "/usr/local/bin/send-report.sh"),
        ("0 */6 * * *", "/usr/local/bin/rotate-logs.sh"),
    ])


def test_new_job_is_last():
    assert [l for l in LINES if l.strip()][-1].split() == "0 */6 * * * /usr/local/bin/rotate-logs.sh".split()


def test_cleanup_commented_out():
    commented = [l for l in LINES if l.lstrip().startswith("#") and "cleanup-tmp.sh" in l]
    assert len(commented) == 1
    assert commented[0].lstrip("# ").split() == "30 4 * * 0 /usr/local/bin/cleanup-tmp.sh".split()


def test_environment_lines_kept():
    assert "SHELL=/bin/bash" in LINES and "MAILTO=ops@example.com" in LINES

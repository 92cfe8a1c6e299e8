"""The three requested changes are made and nothing else changed."""
import configparser


def test_settings():
    cfg = configparser.ConfigParser()
    assert cfg.read("/app/config/app.ini") == ["/app/config/app.ini"]
    got = {s: dict(cfg[s]) for s in cfg.sections()}
    assert got == {
        "server": {"host": "0.0.0.0", "port": "8080", "workers": "2"},
        "database": {"url": "sqlite:////app/data/app.db", "pool_size": "5", "timeout": "30"},
        "logging": {"level": "DEBUG", "file": "/app/logs/app.log"},
    }

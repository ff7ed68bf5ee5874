"""The agent's settings for disk-bounded homes (docs/deploy.md, "Home quotas"): where the
images are kept, the quota when the portal sends none, the switch, the tmpfs cap; a bad
value is refused with a sentence naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.config import DEFAULT_HOME_QUOTA_MB, DEFAULT_TMPFS_MB, AgentConfig, ConfigError


def test_by_default_homes_are_images_beside_the_sessions_folder(tmp_path: Path) -> None:
    config = AgentConfig.from_env(
        {"DESKPOOL_STATE_DIR": str(tmp_path), "DESKPOOL_NODE_NAME": "gpu-a01"}
    )
    assert config.home_images_dir() == tmp_path.resolve() / "homes" / "gpu-a01"
    assert config.sessions_dir().parent.parent == config.home_images_dir().parent.parent  # type: ignore[union-attr]
    assert (config.home_quota_mb, config.desktop_tmpfs_mb) == (
        DEFAULT_HOME_QUOTA_MB,
        DEFAULT_TMPFS_MB,
    )


def test_the_settings_are_read_and_a_shared_root_or_off_means_no_images(tmp_path: Path) -> None:
    config = AgentConfig.from_env(
        {
            "DESKPOOL_HOMES_DIR": "/srv/deskpool-homes",
            "DESKPOOL_HOME_QUOTA_MB": "0",
            "DESKPOOL_DESKTOP_TMPFS_MB": "256",
        }
    )
    assert config.home_images_dir() == Path("/srv/deskpool-homes")
    assert (config.home_quota_mb, config.desktop_tmpfs_mb) == (0, 256)
    assert AgentConfig.from_env({"DESKPOOL_HOME_IMAGES": "off"}).home_images_dir() is None
    shared = AgentConfig.from_env({"DESKPOOL_HOME_ROOT": str(tmp_path)})
    assert shared.home_images_dir() is None  # the file server bounds shared homes


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("DESKPOOL_HOMES_DIR", "homes", "DESKPOOL_HOMES_DIR must be an absolute path"),
        ("DESKPOOL_HOME_IMAGES", "maybe", "DESKPOOL_HOME_IMAGES must be on or off"),
        ("DESKPOOL_HOME_QUOTA_MB", "-1", "DESKPOOL_HOME_QUOTA_MB must be a whole number of MB"),
        ("DESKPOOL_HOME_QUOTA_MB", "10GB", "at least 0, not '10GB'"),
        ("DESKPOOL_DESKTOP_TMPFS_MB", "0", "DESKPOOL_DESKTOP_TMPFS_MB must be a whole number"),
    ],
)
def test_a_bad_value_is_refused_with_its_name(name: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        AgentConfig.from_env({name: value})

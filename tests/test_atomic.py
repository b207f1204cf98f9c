import pytest

from fgnn.atomic import atomic_open


def test_atomic_open_replaces_on_success(tmp_path):
    path = tmp_path / "sub" / "r.json"
    with atomic_open(path, "w") as f:
        f.write("new")
    assert path.read_text() == "new"
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_atomic_open_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(path, "w") as f:
            f.write("half")
            raise RuntimeError("crash mid-write")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left


def test_atomic_open_rejects_other_modes(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        with atomic_open(tmp_path / "x", "a"):
            pass

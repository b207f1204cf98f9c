"""The third hostile trial (issue 40), config types: every field refuses a value of another type
in one line naming the class, the field and the value (``TypeError``; ``ValueError`` for a
float with a fraction where an integer is meant, or an integer out of range); integral floats
and numpy scalars are stored as Python numbers; path fields take ``os.PathLike``.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fgnn.config import (CacheConfig, DiskConfig, JobConfig, LinkConfig, ModelConfig,
                         RuntimeConfig, SamplerConfig, TrainConfig)
from fgnn.job import Job


@pytest.mark.parametrize("make, error, field, shown", [
    (lambda: TrainConfig(epochs="2"), TypeError, "TrainConfig.epochs", "epochs='2'"),
    (lambda: TrainConfig(lr="0.01"), TypeError, "TrainConfig.lr", "lr='0.01'"),
    (lambda: TrainConfig(batch_size="32"), TypeError, "TrainConfig.batch_size", "'32'"),
    (lambda: ModelConfig(hidden="64"), TypeError, "ModelConfig.hidden", "hidden='64'"),
    (lambda: ModelConfig(dropout="0.5"), TypeError, "ModelConfig.dropout", "'0.5'"),
    (lambda: RuntimeConfig(devices="2"), TypeError, "RuntimeConfig.devices", "devices='2'"),
    (lambda: CacheConfig(cache_ratio="0.5"), TypeError, "CacheConfig.cache_ratio", "'0.5'"),
    (lambda: DiskConfig(window="8"), TypeError, "DiskConfig.window", "window='8'"),
    (lambda: LinkConfig(neg_ratio="1"), TypeError, "LinkConfig.neg_ratio", "'1'"),
    (lambda: TrainConfig(epochs=2.7), ValueError, "TrainConfig.epochs", "epochs=2.7"),
    (lambda: TrainConfig(seed=1.5), ValueError, "TrainConfig.seed", "seed=1.5"),
    (lambda: TrainConfig(seed=2 ** 70), ValueError, "TrainConfig.seed", "seed=1180591620717"),
    (lambda: TrainConfig(seed=-1), ValueError, "TrainConfig.seed", "seed=-1"),
    (lambda: RuntimeConfig(queue_size=2 ** 64), ValueError, "RuntimeConfig.queue_size",
     "queue_size=18446744073709551616"),
    (lambda: TrainConfig(epochs=True), TypeError, "TrainConfig.epochs", "epochs=True"),
    (lambda: TrainConfig(resume="yes", checkpoint_dir="c"), TypeError, "TrainConfig.resume",
     "resume='yes'"),
    (lambda: SamplerConfig(fanouts=(10.5, 5.2)), ValueError, "SamplerConfig.fanouts",
     "fanouts=(10.5, 5.2)"),
    (lambda: SamplerConfig(fanouts="10,5"), TypeError, "SamplerConfig.fanouts",
     "fanouts='10,5'"),
    (lambda: SamplerConfig(fanouts=10), TypeError, "SamplerConfig.fanouts", "fanouts=10"),
    (lambda: SamplerConfig(fanouts=(5, 5), relation_fanouts={"cites": (2.5, 1)}), ValueError,
     "SamplerConfig.relation_fanouts", "2.5"),
    (lambda: LinkConfig(hits_k=(1.5,)), ValueError, "LinkConfig.hits_k", "hits_k=(1.5,)"),
    (lambda: ModelConfig(name=3), TypeError, "ModelConfig.name", "name=3"),
    (lambda: JobConfig(train={"epochs": 2}), TypeError, "JobConfig.train",
     "train={'epochs': 2}"),
    (lambda: JobConfig(runtime=TrainConfig()), TypeError, "JobConfig.runtime", "TrainConfig("),
    (lambda: JobConfig(report=3), TypeError, "JobConfig.report", "report=3"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_field(make, error, field, shown):
    with pytest.raises(error) as e:
        make()
    line = str(e.value)
    assert line.startswith(f"{field}: "), line
    assert shown in line and "\n" not in line, line


def test_the_section_refusal_says_how_to_build_it():
    with pytest.raises(TypeError, match=r"must be a TrainConfig \(for a dict d: "
                                        r"TrainConfig\(\*\*d\)\), not dict"):
        JobConfig(train={"epochs": 2})


def test_integral_floats_and_numpy_scalars_are_stored_as_python_numbers():
    rc = RuntimeConfig(devices=1.0)
    assert rc.devices == 1 and type(rc.devices) is int
    t = TrainConfig(epochs=np.int64(3), seed=np.int32(7), lr=np.float32(0.5), resume=False)
    assert (type(t.epochs), type(t.seed), type(t.lr)) == (int, int, float)
    assert (t.epochs, t.seed) == (3, 7)
    s = SamplerConfig(fanouts=[np.int64(10), 5.0])
    assert s.fanouts == (10, 5) and all(type(f) is int for f in s.fanouts)
    assert TrainConfig(seed=2 ** 32 - 1).seed == 2 ** 32 - 1


def test_path_fields_take_path_like(tmp_path):
    cfg = JobConfig(report=tmp_path / "r.json", save_model=tmp_path / "m.pt",
                    data_root=tmp_path,
                    train=TrainConfig(checkpoint_dir=pathlib.Path(tmp_path / "ck")))
    assert cfg.report == str(tmp_path / "r.json") and type(cfg.report) is str
    assert cfg.save_model == str(tmp_path / "m.pt")
    assert cfg.data_root == str(tmp_path)
    assert cfg.train.checkpoint_dir == str(tmp_path / "ck")
    Job(JobConfig(report=tmp_path / "r.json",
                  train=TrainConfig(checkpoint_dir=tmp_path / "ck"))).validate()


def test_a_path_field_refuses_bytes_naming_it():
    with pytest.raises(TypeError, match=r"JobConfig.report: must be a string or an os.PathLike "
                                        r"path, not bytes"):
        JobConfig(report=b"r.json")

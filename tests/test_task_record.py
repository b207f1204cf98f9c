"""A task's typed record: acknowledged to the queue (stamped there, on a copy) and summed per
epoch by the driver into the report's numbers."""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest

from fgnn.executors.queue import GlobalQueue, QueueItem
from fgnn.executors.task_record import TaskRecord


def test_the_queue_stamps_a_copy_of_the_acknowledged_record():
    async def body():
        q = GlobalQueue(maxsize=2)
        await q.begin_epoch(0, 1)
        g = await q.register("fgnn-trainer-1")
        await q.put(QueueItem(0, 0, producer="fgnn-sampler-0"))
        _, item, _ = await q.get("fgnn-trainer-1", g)
        rec = TaskRecord(producer=item.producer, loss=0.5, exchange_parts={"x_push_s": 0.1})
        assert await q.ack("fgnn-trainer-1", item.task_id, rec)
        return rec, q.poll()["records"]

    rec, [logged] = asyncio.run(body())
    assert (logged.task_id, logged.consumer) == (0, "fgnn-trainer-1")
    assert (rec.task_id, rec.consumer) == (-1, "")  # the Trainer's own record is untouched
    assert logged.producer == "fgnn-sampler-0" and logged.loss == 0.5
    assert pickle.loads(pickle.dumps(logged)) == logged  # it crosses the Ray boundary


def test_a_record_is_training_or_evaluation():
    assert not TaskRecord(loss=1.0).evaluation
    assert TaskRecord(split="val", correct=3, count=4).evaluation
    with pytest.raises(TypeError):
        TaskRecord(bytes=3)  # type: ignore[call-arg]  # an unknown field is refused


def test_the_epoch_sums_read_the_records_fields():
    from fgnn.evaluation import EvalPlan
    from fgnn.runtime.epoch import _count_by, _eval_outcome, _first_wait_by, _sum_parts

    recs = [TaskRecord(consumer="a", wait_s=1.0, exchange_parts={"x_claim_s": 0.5,
                                                                  "x_push_s": 0.25}),
            TaskRecord(consumer="b", wait_s=2.0, exchange_parts={"x_claim_s": 0.5}),
            TaskRecord(consumer="a", wait_s=4.0)]
    assert _sum_parts(recs) == {"x_claim_s": 1.0, "x_push_s": 0.25}
    assert list(_sum_parts(recs)) == ["x_claim_s", "x_push_s"]  # first-seen order
    assert _count_by(recs) == {"a": 2, "b": 1}
    assert _first_wait_by(recs) == 3.0  # each consumer's first record
    plan = EvalPlan(("val", "test"), (4, 2), batch_size=2)
    chunks = [TaskRecord(task_id=1, split="val", correct=1, count=2, loss_sum=0.5,
                         extract_s=0.1, eval_s=0.2, pair_scores=np.array([3.0]),
                         pair_labels=np.array([1])),
              TaskRecord(task_id=0, split="val", correct=2, count=2, loss_sum=0.25,
                         extract_s=0.1, eval_s=0.2, pair_scores=np.array([2.0]),
                         pair_labels=np.array([0])),
              TaskRecord(task_id=2, split="test", correct=0, count=2, loss_sum=1.0,
                         extract_s=0.1, eval_s=0.2)]
    out = _eval_outcome(plan, chunks, elapsed=1.0)
    assert out.batches == 3 and out.accuracy("val") == 0.75 and out.accuracy("test") == 0.0
    assert out.extract_s == pytest.approx(0.3) and out.forward_s == pytest.approx(0.6)
    scores, labels = out.pairs["val"]  # in task order
    assert scores.tolist() == [2.0, 3.0] and labels.tolist() == [0, 1]
    assert "test" not in out.pairs

"""Which CUDA-only branches of fgnn the CPU tests reach (through the fake GPU), from coverage.py.

A tool, not a test (pytest collects ``test_*.py`` only). Each entry of :data:`BRANCHES` names a
CUDA-only branch by a line of its body (found by its text, so line shifts do not matter), the
tests that reach it through ``tests/fake_cuda.py``, and a deliberate break of it that those tests
must catch (``tests/cuda_breaks.py`` applies them). The bodies of :mod:`fgnn.gpu` itself are the
real torch calls and only a GPU runs them (``docs/gpu.md``).

Usage::

    PYTHONPATH=. python -m pytest -q -p no:cacheprovider --cov=fgnn --cov-branch \\
        --cov-report=json:/tmp/cuda-cov.json tests/test_cuda_cache.py tests/test_cuda_executors.py
    PYTHONPATH=. python tests/cuda_coverage.py /tmp/cuda-cov.json [--min 95]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = "tests/test_cuda_cache.py::"
EXE = "tests/test_cuda_executors.py::"


@dataclass(frozen=True)
class Branch:
    """One CUDA-only branch: ``path`` (under the repository), ``line`` (the text of one line of
    its body, unique in the file), the covering ``tests`` and a ``broken`` version of that line
    (or ``None``: the line is deleted for ``pass`` at its indentation)."""

    path: str
    line: str
    tests: tuple[str, ...]
    broken: str | None = None

    def replaced(self) -> str:
        """The line as broken."""
        if self.broken is not None:
            return self.broken
        return self.line[:len(self.line) - len(self.line.lstrip())] + "pass"


FS = "fgnn/cache/feature_store.py"
SA = "fgnn/executors/sampler.py"
TR = "fgnn/executors/transport.py"
ST = "fgnn/executors/_streams.py"
GR = "fgnn/exchange/groups.py"
ME = "fgnn/executors/_memory.py"
BU = "fgnn/cache/budget.py"
PS = "fgnn/cache/peer_share.py"
_STAGING = CACHE + "test_host_rows_go_through_one_pinned_staging_buffer_reused_after_its_copy"
_IPC = CACHE + "test_cuda_ipc_export_and_open_on_this_gpu"
_COPY = EXE + "test_copy_stream_pins_copies_on_its_stream_and_hands_over_to_training"
_NCCL = EXE + "test_nccl_group_gets_its_timeout_and_an_error_handling_that_keeps_the_process"
_METER = EXE + "test_step_memory_meter_on_a_gpu_reads_the_allocator_and_the_driver"
_HOSTCOPY = EXE + "test_host_copy_stages_into_pinned_memory_and_waits_once"
_JOB = EXE + "test_a_job_on_gpus_lays_them_out_and_refuses_more_than_are_present"

BRANCHES: tuple[Branch, ...] = (
    Branch(FS, "        return gpu.to_device(gpu.pin(t), device)",
           (CACHE + "test_upload_pins_the_host_tensor_and_copies_without_blocking",),
           "        return gpu.to_device(t, device)"),
    Branch(FS, "                self._staging_done.synchronize()  # last batch's copy out of the "
               "buffer is done", (_STAGING,)),
    Branch(FS, "                self._staging = gpu.empty_pinned((max(k, 1), self.dim), "
               "self.host.dtype)", (_STAGING,),
           "                self._staging = torch.empty((max(k, 1), self.dim), "
           "dtype=self.host.dtype)"),
    Branch(FS, "            rows = gpu.to_device(stage, self.device)", (_STAGING,),
           "            rows = gpu.to_device(stage, self.device, non_blocking=False)"),
    Branch(FS, "            self._staging_done.record()", (_STAGING,)),
    Branch(FS, "                rows = gpu.to_device(buf.index_select(0, upload(p, where)), "
               "self.device)", (CACHE + "test_a_peer_buffer_is_gathered_on_its_gpu_and_copied_over",),
           "                rows = buf.index_select(0, upload(p, where))"),
    Branch(TR, "        return gpu.copy_into(gpu.empty_pinned(t.shape, t.dtype), t)", (_HOSTCOPY,),
           "        return gpu.copy_into(torch.empty(t.shape, dtype=t.dtype), t)"),
    Branch(TR, "        gpu.current_stream(dev).synchronize()  # one wait for every copy",
           (_HOSTCOPY,)),
    Branch(SA, '            out["cuda_peak_bytes"] = gpu.max_memory_allocated(self.device)',
           (EXE + "test_a_cuda_sampler_syncs_once_per_cache_choice_and_reports_its_working_set",),
           '            out["cuda_peak_bytes"] = gpu.max_memory_reserved(self.device)'),
    Branch(SA, "            gpu.current_stream(self.device).synchronize()  # on its copy stream",
           (EXE + "test_a_cuda_sampler_syncs_once_per_cache_choice_and_reports_its_working_set",)),
    Branch(SA, '            ref = host.put(pack_sample_tensors(sample), inline, '
               '_tensor_transport="cuda_ipc")',
           (EXE + "test_the_cuda_ipc_transport_puts_device_tensors",),
           "            ref = host.put(pack_sample_tensors(sample), inline)"),
    Branch(SA, "                sample = host_copy(sample, narrow=self._narrow)",
           (EXE + "test_object_store_transport_copies_a_device_sample_to_the_host",)),
    Branch(ST, "        with gpu.use_stream(self.stream):", (_COPY,),
           "        with contextlib.nullcontext():"),
    Branch(ST, "        return gpu.to_device(gpu.pin(t) if gpu.is_host(here) else t, self.device)",
           (_COPY,), "        return gpu.to_device(t, self.device)"),
    Branch(ST, "        ev.record(self.stream)",
           (EXE + "test_the_copy_event_is_on_the_copy_stream_wherever_it_is_recorded",),
           "        ev.record()"),
    Branch(ST, "        current.wait_event(event)", (_COPY,)),
    Branch(ST, "                gpu.record_stream(t, current)", (_COPY,)),
    Branch(ST, "        self._end.synchronize()",
           (EXE + "test_stage_clock_times_with_events_resolved_after_their_end",)),
    Branch(ST, "        ev.record(gpu.current_stream(self.device))",
           (EXE + "test_stage_clock_times_with_events_resolved_after_their_end",),
           "        ev.record(gpu.new_stream(self.device))"),
    Branch(GR, '    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", NCCL_ERROR_HANDLING)',
           (_NCCL,)),
    Branch(GR, "    opts._timeout = timeout", (_NCCL,)),
    Branch(GR, "        return nccl(prefixed, rank, size, timeout, device)", (_NCCL,),
           '        return nccl(prefixed, rank, size, timeout, torch.device("cpu", 0))'),
    Branch(GR, "    with gpu.use_stream(stream):",
           (EXE + "test_the_seed_count_is_read_on_a_side_stream_once_the_sum_is_done",),
           "    if stream is not None:"),
    Branch(ME, "            gpu.reset_peak(self.device)", (_METER,)),
    Branch(ME, "            self._base = gpu.memory_allocated(self.device)", (_METER,),
           "            self._base = 0"),
    Branch(ME, "            return step(batch)", (_METER,),
           "            return None"),
    Branch(ME, "            peak = gpu.max_memory_allocated(self.device) - self._base", (_METER,),
           "            peak = gpu.max_memory_allocated(self.device)"),
    Branch(ME, "            free, total = gpu.mem_get_info(self.device)", (_METER,),
           "            total, free = gpu.mem_get_info(self.device)"),
    Branch(ME, "    return max(0, used - gpu.memory_reserved(device))", (_METER,),
           "    return used"),
    Branch(BU, "        gpu.reset_peak(self.device)",
           (CACHE + "test_cuda_peak_meter_resets_runs_and_synchronises",)),
    Branch(BU, "        return gpu.max_memory_allocated(self.device)",
           (CACHE + "test_cuda_peak_meter_resets_runs_and_synchronises",),
           "        return gpu.max_memory_reserved(self.device)"),
    Branch(BU, "        budget_bytes = gpu.total_memory(dev)",
           (CACHE + "test_cache_budget_on_a_gpu_is_its_total_memory",),
           "        budget_bytes = 1 << 30"),
    Branch(PS, "        return BufferHandle(\"ipc\", name=name, ipc=tuple(args), "
               "gpu=_gpu_uuid(gpu.device_of(t)),", (_IPC,),
           "        return BufferHandle(\"ipc\", name=name, ipc=tuple(args), gpu=\"\","),
    Branch(PS, "    args[6] = dev.index if dev is not None and dev.index is not None else \\",
           (_IPC,), "    args[6] = args[6] if dev is not None and dev.index is not None else \\"),
    Branch(PS, '        raise PeerShareError(f"a CUDA IPC handle cannot be mapped on {dev}")',
           (_IPC,), "        pass"),
    Branch(PS, "    except Exception as err:  # noqa: BLE001 - every refusal becomes a host read, "
               "with why", (_IPC,), "    except KeyError as err:"),
    Branch("fgnn/graph/csr.py",
           "        return CSRGraph._trusted(gpu.pin(self.indptr), gpu.pin(self.indices), w)",
           (CACHE + "test_csr_pin_memory_pins_every_array",), "        return self"),
    Branch("fgnn/checkpoint.py", '        state["cuda"] = gpu.rng_state_all()',
           (CACHE + "test_checkpoint_captures_and_restores_the_cuda_rng",)),
    Branch("fgnn/checkpoint.py",
           '            gpu.set_rng_state_all([t.cpu() for t in state["cuda"]])',
           (CACHE + "test_checkpoint_captures_and_restores_the_cuda_rng",)),
    Branch("fgnn/cache/disk_cpu_buffer.py",
           "        self.buffer = gpu.empty_host((capacity, f), backing.dtype, pin)",
           (CACHE + "test_cpu_buffer_and_its_misses_are_pinned_with_cuda",),
           "        self.buffer = gpu.empty_host((capacity, f), backing.dtype, False)"),
    Branch("fgnn/cache/disk_cpu_buffer.py",
           "            out = gpu.empty_host((ids.numel(), self.dim), self.dtype, self.pin)",
           (CACHE + "test_cpu_buffer_and_its_misses_are_pinned_with_cuda",),
           "            out = gpu.empty_host((ids.numel(), self.dim), self.dtype, False)"),
    Branch("fgnn/cache/disk_source.py",
           "        out = gpu.empty_host((m, f), self.dtype, self.pin)",
           (CACHE + "test_disk_rows_are_pinned_with_cuda",),
           "        out = gpu.empty_host((m, f), self.dtype, False)"),
    Branch("fgnn/executors/device.py", "        gpu.set_device(device)",
           (EXE + "test_an_executor_binds_its_gpu_as_the_thread_current_device",)),
    Branch("fgnn/job.py", "    n_cuda = gpu.device_count() if gpu.is_available() else 0", (_JOB,),
           "    n_cuda = 0"),
    Branch("fgnn/job.py", "            if n_cuda < rc.gpus_needed:", (_JOB,),
           "            if False:"),
    Branch("fgnn/memory_plan.py",
           "    logical = (not gpu.is_available()) if logical is None else logical",
           (EXE + "test_the_memory_plan_on_gpus_keeps_the_device_cache_off_the_host",),
           "    logical = True if logical is None else logical"),
)


def line_number(b: Branch, root: Path = ROOT) -> int:
    """The 1-based line of ``b`` in its file.

    Raises:
        ValueError: when the line is not in the file exactly once.
    """
    lines = (root / b.path).read_text().splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if text == b.line]
    if len(hits) != 1:
        raise ValueError(f"{b.path}: {len(hits)} lines read {b.line.strip()!r} (want one)")
    return hits[0]


def reached(report: dict, root: Path = ROOT) -> list[tuple[Branch, int, bool]]:
    """``(branch, line, reached)`` for every branch, from a coverage.py JSON report."""
    files = {str(Path(k)).replace("\\", "/"): v for k, v in report["files"].items()}
    out = []
    for b in BRANCHES:
        n = line_number(b, root)
        data = files.get(b.path) or files.get(str(root / b.path))
        out.append((b, n, data is not None and n in data["executed_lines"]))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table and the figure; exit 1 under ``--min`` percent."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="coverage.py JSON (--cov-report=json:PATH)")
    ap.add_argument("--min", type=float, default=95.0, help="percent of branches to reach")
    args = ap.parse_args(argv)
    rows = reached(json.loads(Path(args.report).read_text()))
    for b, n, ok in rows:
        print(f"{'reached' if ok else 'MISSED '}  {b.path}:{n}  {b.line.strip()[:70]}")
    hit = sum(ok for _, _, ok in rows)
    pct = 100.0 * hit / len(rows)
    print(f"CUDA-only branches reached on CPU: {hit}/{len(rows)} = {pct:.1f}% "
          f"(target {args.min:.0f}%)")
    return 0 if pct >= args.min else 1


if __name__ == "__main__":
    sys.exit(main())

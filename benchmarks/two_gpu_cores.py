"""Do two GPUs timed at once slow each other's launch-bound programs, and does the pair of timed cores
decide it? On the whole release, the same rows' timing took 8% longer a trial (median) on both GPUs of a
2x H100 host than on one of them, and launch-bound references (< 0.1 ms) read 3-18% slower
(docs/gpu-runs.md#2026-11-27-two-gpu-release). This prints the host's CPU and GPU topology (packages,
NUMA nodes, SMT siblings, each GPU's local cores) and times launch-bound references as the timed loop
times a call (device-wide sync, host clock, forward, device-wide sync), one persistent process per GPU,
each pinned to the core a configuration names: one GPU alone, then both at once, for the cores the
evaluator picks (cudal1.evaluator.cores.timed_core) and for other pairs; and one GPU timed while the other
takes loads such as a batch's loads ahead (``L<device>`` in a configuration: fresh processes, one after
another on the spare cores, that import torch, create a CUDA context on that device and load and call
the rows' references), which a device's timing does not wait for on a two-GPU host.

    PYTHONPATH=. python3 benchmarks/two_gpu_cores.py --release carry/h100.jsonl --json $OUT/cores.json
    PYTHONPATH=. python3 benchmarks/two_gpu_cores.py --release carry/h100.jsonl --configs '0@31;0@31+L1' --rounds 3

Problem code only (trusted references); no candidate runs here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cudal1.evaluator.cores import timed_core  # noqa: E402


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def topology() -> dict[str, Any]:
    """Each allowed CPU's package, NUMA node and SMT siblings; each NVIDIA PCI function's node and cores."""
    cpus = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}")
        nodes = [p.name for p in base.glob("node*")]
        cpus[cpu] = {"package": _read(base / "topology/physical_package_id"),
                     "core": _read(base / "topology/core_id"),
                     "siblings": _read(base / "topology/thread_siblings_list"),
                     "node": nodes[0][4:] if nodes else ""}
    gpus = {}
    for dev in sorted(Path("/sys/bus/pci/devices").glob("*")):
        if _read(dev / "vendor") == "0x10de" and _read(dev / "class").startswith("0x03"):
            gpus[dev.name] = {"numa_node": _read(dev / "numa_node"), "local_cpulist": _read(dev / "local_cpulist")}
    out: dict[str, Any] = {"cpus": cpus, "gpus": gpus}
    for name, cmd in {"lscpu": ["lscpu"], "topo": ["nvidia-smi", "topo", "-m"],
                      "bus_ids": ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]}.items():
        try:
            out[name] = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            out[name] = repr(exc)
    return out


def child(release: Path, rows: list[str], device: str) -> None:
    """Load the rows on ``device``, then for each command line on stdin ({"core", "at", "seconds"}) wait
    until ``at`` (the parent's barrier), time each row pinned to ``core`` and answer one JSON line."""
    import torch
    from core_noise import load, time_on_core

    from cudal1.problems import load_cudal1_release

    torch.cuda.set_device(torch.device(device))
    problems = {r.problem.problem_id: r.problem for r in load_cudal1_release(release)}
    models = {pid: load(problems[pid].source, torch.device(device)) for pid in rows}
    print(json.dumps({"ready": device}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        os.sched_setaffinity(0, {cmd["core"]})
        time.sleep(max(0.0, cmd["at"] - time.time()))
        ms = {pid: round(statistics.median(time_on_core(m, x, cmd["seconds"])), 4) for pid, (m, x) in models.items()}
        print(json.dumps({"device": device, "core": cmd["core"], "ms": ms}), flush=True)


LOAD = r"""
import sys, torch
sys.path.insert(0, sys.argv[3])
from core_noise import load
from cudal1.problems import load_cudal1_release
device = torch.device(sys.argv[1])
torch.zeros(1, device=device)
problems = {r.problem.problem_id: r.problem for r in load_cudal1_release(sys.argv[2])}
with torch.no_grad():
    for pid in sys.argv[4].split(","):
        model, inputs = load(problems[pid].source, device)
        for _ in range(3):
            model(*inputs)
if device.type == "cuda":
    torch.cuda.synchronize(device)
"""


def loads(release: Path, rows: str, device: str, stop: float, env: dict[str, str]) -> int:
    """Fresh load processes on ``device``, one after another, two at a time, until ``stop``: how many
    ended well (a load that fails says so: its timing would not have had loads beside it)."""
    from cudal1.evaluator.cores import spare_cores

    spare = spare_cores()
    here = str(Path(__file__).resolve().parent)
    running: list[subprocess.Popen] = []
    done = 0
    while time.time() < stop or running:
        for proc in [p for p in running if p.poll() is not None]:
            running.remove(proc)
            if proc.returncode != 0:
                sys.exit(f"two_gpu_cores.py: a load on {device} failed: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
            done += 1
        if time.time() < stop and len(running) < 2:
            running.append(subprocess.Popen([sys.executable, "-c", LOAD, device, str(release), here, rows], env=env,
                                            preexec_fn=(lambda: os.sched_setaffinity(0, spare)) if spare else None,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        time.sleep(0.02)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--rows", default="L2-70,L2-25,L2-53,L1-19")
    ap.add_argument("--seconds", type=float, default=1.0, help="per row, per configuration")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--configs", default="", help="e.g. '0@31;0@31+1@30' (default: from the topology)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rows = args.rows.split(",")
    if args.child:
        child(args.release, rows, args.child)
        return
    topo = topology()
    print(topo.get("lscpu", ""), topo.get("topo", ""), topo.get("bus_ids", ""), sep="\n")
    for cpu, t in topo["cpus"].items():
        print(f"cpu {cpu:3d} package {t['package']} node {t['node']} core {t['core']} siblings {t['siblings']}")
    print(json.dumps(topo["gpus"]))
    a, b = timed_core("cuda:0"), timed_core("cuda:1")
    allowed = sorted(os.sched_getaffinity(0))
    if args.configs:  # "0@31+1@30": devices on cores; "0@31+L1": device 0 on core 31, loads on device 1
        configs = [[(int(p[1:]), -1) if p.startswith("L") else (int(p.split("@")[0]), int(p.split("@")[1]))
                    for p in cfg.split("+")] for cfg in args.configs.split(";")]
    else:
        if a is None or b is None:
            sys.exit("two_gpu_cores.py: too few cores to pin; name --configs")
        far = allowed[len(allowed) // 2 - 1]  # the other half: another package or node on most two-socket hosts
        configs = [[(0, a)], [(1, b)], [(0, a), (1, b)], [(1, far)], [(0, a), (1, far)], [(0, a), (1, -1)]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [".", os.environ.get("PYTHONPATH", "")])))
    kids = {d: subprocess.Popen([sys.executable, __file__, "--release", str(args.release), "--rows", args.rows,
                                 "--child", f"cuda:{d}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=env)
            for d in sorted({d for cfg in configs for d, c in cfg if c >= 0})}
    for kid in kids.values():
        json.loads(kid.stdout.readline())
    results = []
    for rnd in range(args.rounds):
        for cfg in configs:
            timed = [(d, c) for d, c in cfg if c >= 0]
            beside = [d for d, c in cfg if c < 0]
            # loads start first, so the timing runs among them, and stop when the timing should be over
            at = time.time() + (3.0 if beside else 0.5)
            stop = at + args.seconds * len(rows) + 1.0
            for d, core in timed:
                kids[d].stdin.write(json.dumps({"core": core, "at": at, "seconds": args.seconds}) + "\n")
                kids[d].stdin.flush()
            with ThreadPoolExecutor(max(1, len(beside))) as pool:
                counts = [pool.submit(loads, args.release, args.rows, f"cuda:{d}", stop, env) for d in beside]
                answers = [json.loads(kids[d].stdout.readline()) for d, _ in timed]
                answers += [{"device": f"cuda:{d}", "loads": f.result()} for d, f in zip(beside, counts)]
            label = "+".join(f"cuda:{d}@{c}" if c >= 0 else f"loads on cuda:{d}" for d, c in cfg)
            results.append({"round": rnd, "config": label, "answers": answers})
            print(rnd, f"{label:32s}", "  ".join(f"{x['device']}: {x.get('ms', x.get('loads'))}" for x in answers),
                  flush=True)
    for kid in kids.values():
        kid.stdin.close()
        kid.wait(timeout=30)
    if args.json is not None:
        args.json.write_text(json.dumps({"topology": topo, "rows": rows, "seconds": args.seconds,
                                         "results": results}, indent=1))


if __name__ == "__main__":
    main()

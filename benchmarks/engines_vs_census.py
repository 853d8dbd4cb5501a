"""Engine model (engines.step_collectives) vs a census_recorded.json written by helper CENSUS:
per strategy and (op, group size, dtype), calls and bytes predicted / recorded; <<< marks a
miss (bytes off > 2% or calls off > 1).

    PYTHONPATH=src python benchmarks/engines_vs_census.py census_recorded.json
"""

import json
import sys
from collections import defaultdict

from prism_strategy.engines import step_collectives
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import get_strategy

d = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "census_recorded.json"))
print(d.get("notes"))
for shape, run in d["shapes"].items():
    c = run["config"]
    b = TransformerSpec(**c["model_spec"])
    v = TransformerSpec(**c["vision_spec"]) if c.get("vision_spec") else None
    kw = {}
    ms = MultimodalSpec(backbone=b, vision=v, mode=c["mode"])
    t = TrainingSpec.from_precision(c["precision"], seq_len=c["seq_len"], micro_batch=c["micro_batch"])
    parts = model_parts(ms, t)
    lay = Layout(nodes=c["nproc"] // c["ranks_per_node"], ranks_per_node=c["ranks_per_node"])
    print(
        f"\n=== {shape}: world {run['world']} layout {lay} ga {c['grad_accum']} {[(p.name, p.params, p.trains) for p in parts]}"
    )
    for s in run["strategies"]:
        spec = get_strategy(s["strategy"]).with_options(
            bucket_mb=c.get("bucket_mb"), reduce_dtype=c.get("reduce_dtype")
        )
        pred = defaultdict(lambda: [0, 0.0])
        for x in step_collectives(spec, parts, t, lay, c["grad_accum"]):
            k = (x.op, x.group_size, x.dtype)
            pred[k][0] += x.calls
            pred[k][1] += x.bytes
        rec = {
            (r["op"], r["group_size"], r["dtype"]): (r["calls"], r["bytes"], r.get("phases")) for r in s["collectives"]
        }
        print(f"-- {s['strategy']} {s.get('error', '')}")
        for k in sorted(set(pred) | set(rec), key=str):
            pc, pb = pred.get(k, (0, 0.0))
            rc, rb, ph = rec.get(k, (0, 0.0, None))
            err = (pb - rb) / rb * 100 if rb else float("inf")
            flag = "" if (abs(err) <= 2 and abs(pc - rc) <= 1) else "  <<<"
            print(
                f"   {k[0]:15s} g{k[1]} {k[2]:9s} calls {pc:4d} / {rc:4d}  bytes {pb:12.0f} / {rb:12.0f} ({err:+.1f}%){flag} {ph if flag else ''}"
            )

#!/usr/bin/env python3
"""tests/data/lmeval/smollm2_fp.json from lm-eval's logged samples of the limit-50 run:
per task, per item, the log-likelihood and is_greedy of each choice and the gold index, as the
harness computed them (tests/eval/lmeval_reference_test.cc compares sinkq with them).

    python3 bench/lmeval/test_reference.py /tmp/lmeval-out/limit50 tests/data/lmeval/smollm2_fp.json
"""
import glob
import json
import os
import sys

TASKS = ["piqa", "arc_easy", "arc_challenge", "winogrande", "boolq", "openbookqa", "social_iqa"]


def main(samples_dir, out):
    ref = {"source": "lm-evaluation-harness 0.4.13 (HFLM, transformers 5.24.0, torch 2.15.0 CPU, float32, eager "
                     "attention, no BOS) on SmolLM2-135M-Instruct dequantized from "
                     "../shared/models/smollm2-135m-instruct-q4_1/model.gguf; tasks bench/lmeval/tasks over "
                     "../shared/data/commonsense; bash bench/lmeval/run_reference.sh", "tasks": {}}
    for t in TASKS:
        (path,) = glob.glob(os.path.join(samples_dir, "**", f"samples_cs_{t}_*.jsonl"), recursive=True)
        rows = []
        with open(path) as f:
            for line in f:
                s = json.loads(line)
                # WinoGrande's gold is its doc_to_text (the multiple-input case), the others' the target.
                gold = {"1": 0, "2": 1}[str(s["doc"]["answer"])] if t == "winogrande" else int(s["target"])
                rows.append({"doc_id": s["doc_id"], "gold": gold, "ll": [float(r[0][0]) for r in s["resps"]],
                             "greedy": [r[0][1] == "True" for r in s["resps"]]})
        ref["tasks"][t] = sorted(rows, key=lambda r: r["doc_id"])
    with open(out + ".tmp", "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

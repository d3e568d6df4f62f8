"""process_docs for the LLM-Adapters commonsense files (shared/data/commonsense/<task>/test.json).

Each record is {instruction, input, output, answer}; the question and the choices are inside the
instruction text. These functions parse it back into the fields that lm-eval's own task
definitions read (piqa: goal/sol1/sol2/label, arc: question/choices/answerKey, winogrande:
sentence/option1/option2/answer, boolq: question/label, openbookqa: question_stem/choices/answerKey,
social_iqa: answerA..C/label), so that the YAMLs beside this file can use lm-eval's own
doc_to_text / doc_to_choice / doc_to_target.

Conventions (agreed with sinkq's C++ parser, src/eval/tasks.cc):
  * choice texts are taken VERBATIM between the markers (no strip);
  * ARC / OBQA / SIQA: "<lead>Q\n\nAnswer1: A1 Answer2: A2 ... AnswerN: AN\n\nAnswer format:
    answer1/.../answerN", N read from the format line; choice k runs from "Answer{k}: " to the first
    " Answer{k+1}: " after it (the last one to the "\n\nAnswer format: " line);
  * the gold index comes from `answer` (answerK / solutionK / optionK -> K-1; boolq true -> 1 "yes").
Every record that does not fit raises ParseError naming the file position and the reason.
`parse_all()` (python3 utils.py [DATA_DIR]) checks every item of every file and also lists items
whose markers occur more than once (ambiguous, parsed by the first-occurrence rule above).
"""

import re
import sys

ARC_LEAD = "Please choose the correct answer to the question: "
PIQA_LEAD = "Please choose the correct solution to the question: "
WINO_LEAD = "Please choose the correct answer to fill in the blank to complete the given sentence: "
BOOLQ_LEAD = "Please answer the following question with true or false, question: "


class ParseError(ValueError):
    pass


def _check(cond, idx, msg):
    if not cond:
        raise ParseError(f"item {idx}: {msg}")


def _gold(answer, prefix, n, idx):
    for k in range(1, n + 1):
        if answer == f"{prefix}{k}":
            return k - 1
    raise ParseError(f"item {idx}: answer {answer!r} is not one of {prefix}1..{prefix}{n}")


def parse_answers(ins, idx):
    """ARC / OBQA / SIQA layout -> (question, [choice texts]) and N."""
    fmt_marker = "\n\nAnswer format: "
    f = ins.rfind(fmt_marker)
    _check(f >= 0, idx, "no '\\n\\nAnswer format: '")
    fmt = ins[f + len(fmt_marker):]
    m = re.fullmatch(r"answer1(?:/answer\d+)*", fmt)
    _check(m is not None, idx, f"answer format line {fmt!r}")
    n = fmt.count("/") + 1
    _check(fmt == "/".join(f"answer{k}" for k in range(1, n + 1)), idx, f"answer format {fmt!r}")
    body = ins[:f]
    _check(body.startswith(ARC_LEAD), idx, f"does not start with {ARC_LEAD!r}")
    q_end = body.find("\n\nAnswer1: ", len(ARC_LEAD))
    _check(q_end >= 0, idx, "no '\\n\\nAnswer1: '")
    question = body[len(ARC_LEAD):q_end]
    pos = q_end + 2  # at "Answer1: "
    choices = []
    for k in range(1, n + 1):
        opener = f"Answer{k}: "
        _check(body.startswith(opener, pos), idx, f"expected {opener!r} at char {pos}")
        b = pos + len(opener)
        if k == n:
            choices.append(body[b:])
            break
        nxt = f" Answer{k + 1}: "
        e = body.find(nxt, b)
        _check(e >= 0, idx, f"no {nxt!r} after char {b}")
        choices.append(body[b:e])
        pos = e + 1
    return question, choices, n


def _arc_like(doc, idx, field):
    question, choices, n = parse_answers(doc["instruction"], idx)
    gold = _gold(doc["answer"], "answer", n, idx)
    labels = [chr(ord("A") + i) for i in range(n)]
    return {
        "idx": idx,
        field: question,
        "choices": {"text": choices, "label": labels},
        "answerKey": labels[gold],
    }


def parse_arc(doc, idx):
    return _arc_like(doc, idx, "question")


def parse_openbookqa(doc, idx):
    return _arc_like(doc, idx, "question_stem")


def parse_social_iqa(doc, idx):
    # lm-eval's prompt is "Q: {{context}} {{question}}\nA:"; this layout has the two already
    # joined (context + " " + question) as one question text, kept here as `question`.
    question, choices, n = parse_answers(doc["instruction"], idx)
    _check(n == 3, idx, f"{n} answers, social_iqa has 3")
    gold = _gold(doc["answer"], "answer", 3, idx)
    return {
        "idx": idx,
        "question": question,
        "answerA": choices[0],
        "answerB": choices[1],
        "answerC": choices[2],
        "label": str(gold + 1),
    }


def parse_piqa(doc, idx):
    ins = doc["instruction"]
    tail = "\n\nAnswer format: solution1/solution2"
    _check(ins.startswith(PIQA_LEAD), idx, f"does not start with {PIQA_LEAD!r}")
    _check(ins.endswith(tail), idx, f"does not end with {tail!r}")
    body = ins[len(PIQA_LEAD):len(ins) - len(tail)]
    s1 = body.find("\n\nSolution1: ")
    _check(s1 >= 0, idx, "no '\\n\\nSolution1: '")
    goal = body[:s1]
    b1 = s1 + len("\n\nSolution1: ")
    s2 = body.find("\n\nSolution2: ", b1)
    _check(s2 >= 0, idx, "no '\\n\\nSolution2: '")
    sol1 = body[b1:s2]
    sol2 = body[s2 + len("\n\nSolution2: "):]
    return {"idx": idx, "goal": goal, "sol1": sol1, "sol2": sol2,
            "label": _gold(doc["answer"], "solution", 2, idx)}


def parse_winogrande(doc, idx):
    ins = doc["instruction"]
    tail = " Answer format: option1/option2"
    _check(ins.startswith(WINO_LEAD), idx, f"does not start with {WINO_LEAD!r}")
    _check(ins.endswith(tail), idx, f"does not end with {tail!r}")
    body = ins[len(WINO_LEAD):len(ins) - len(tail)]
    o1 = body.find("\n\nOption1: ")
    _check(o1 >= 0, idx, "no '\\n\\nOption1: '")
    sentence = body[:o1]
    b1 = o1 + len("\n\nOption1: ")
    o2 = body.find(" Option2: ", b1)
    _check(o2 >= 0, idx, "no ' Option2: '")
    option1 = body[b1:o2]
    option2 = body[o2 + len(" Option2: "):]
    _check("_" in sentence, idx, "sentence has no blank '_'")
    gold = _gold(doc["answer"], "option", 2, idx)
    return {"idx": idx, "sentence": sentence, "option1": option1, "option2": option2,
            "answer": str(gold + 1)}


def parse_boolq(doc, idx):
    ins = doc["instruction"]
    tail = "?\n\nAnswer format: true/false"
    _check(ins.startswith(BOOLQ_LEAD), idx, f"does not start with {BOOLQ_LEAD!r}")
    _check(ins.endswith(tail), idx, f"does not end with {tail!r}")
    question = ins[len(BOOLQ_LEAD):len(ins) - len(tail)]
    _check(doc["answer"] in ("true", "false"), idx, f"answer {doc['answer']!r} is not true/false")
    # lm-eval super_glue/boolq: label 1 = "yes" (true), 0 = "no" (false).
    return {"idx": idx, "question": question, "label": 1 if doc["answer"] == "true" else 0}


def _process(parse):
    def process_docs(dataset):
        return dataset.map(lambda doc, idx: parse(doc, idx), with_indices=True,
                           remove_columns=dataset.column_names)
    return process_docs


process_piqa = _process(parse_piqa)
process_arc = _process(parse_arc)
process_winogrande = _process(parse_winogrande)
process_boolq = _process(parse_boolq)
process_openbookqa = _process(parse_openbookqa)
process_social_iqa = _process(parse_social_iqa)

# lm-eval task name -> (folder under the data dir, parser, markers whose repetition is ambiguous)
TASKS = {
    "piqa": ("piqa", parse_piqa, ["\n\nSolution1: ", "\n\nSolution2: "]),
    "arc_easy": ("ARC-Easy", parse_arc, None),
    "arc_challenge": ("ARC-Challenge", parse_arc, None),
    "winogrande": ("winogrande", parse_winogrande, ["\n\nOption1: ", " Option2: ", "_"]),
    "boolq": ("boolq", parse_boolq, ["?\n\nAnswer format"]),
    "openbookqa": ("openbookqa", parse_openbookqa, None),
    "social_iqa": ("social_i_qa", parse_social_iqa, None),
}


def parse_all(data_dir="/work/shared/data/commonsense"):
    """Parses every item of every task; returns {task: {"n", "failures", "ambiguous"}}."""
    import json
    out = {}
    for task, (folder, parse, markers) in TASKS.items():
        recs = json.load(open(f"{data_dir}/{folder}/test.json", encoding="utf-8"))
        fails, amb = [], []
        for i, r in enumerate(recs):
            try:
                parse(r, i)
            except ParseError as e:
                fails.append(str(e))
                continue
            ins = r["instruction"]
            ms = markers
            if ms is None:
                n = ins.rsplit("Answer format: ", 1)[1].count("/") + 1
                ms = ["\n\nAnswer format: ", "\n\nAnswer1: "] + [f" Answer{k}: " for k in range(2, n + 1)]
            rep = [m for m in ms if ins.count(m) > 1]
            if rep:
                amb.append((i, rep))
        out[task] = {"n": len(recs), "failures": fails, "ambiguous": amb}
    return out


if __name__ == "__main__":
    res = parse_all(*sys.argv[1:2])
    for task, r in res.items():
        print(f"{task}: {r['n']} items, {len(r['failures'])} parse failures, "
              f"{len(r['ambiguous'])} with a repeated marker")
        for f in r["failures"]:
            print("  FAIL", f)
        for i, rep in r["ambiguous"]:
            print("  repeated", i, [m.replace("\n", "\\n") for m in rep])

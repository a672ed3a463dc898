"""A review queue out to Label Studio and its annotations back in, in Label Studio's documented JSON formats.

Export (``export_queue``): an evaluation run's ``review/queue.jsonl`` as Label Studio tasks, its JSON import format
(a list of ``{"data": {...}, "predictions": [...]}``), in ``review/label-studio/tasks.json``, with the labelling
config the tasks need (``label-config.xml``): one choice, ``right`` or ``wrong``, of the output for its prompt
(``verdict``), and where the workload's checker judges attributes (the queue's ``checker_attributes``: the image
workload's colour, shape, size, position) one more per attribute (``attribute_<name>``), optional. The checker's
verdicts go as a prediction (``model_version: "checker"``), so a reviewer sees them and corrects them. Each task's
``data`` carries the run, the date and the prompt id it came from.

Import (``import_export``): a Label Studio JSON export (a list of tasks, each with its ``annotations``) validated
like any drop: a task this project did not export (no run, or a prompt its run's queue does not hold), an
annotation that is not one verdict choice, annotations of one task that disagree, or a task already labelled by
an earlier import are quarantined with their reason; a cancelled annotation is no label. Accepted labels become a
labels file in the form ``review.agreement`` reads (``evaluations/<model>/labels/label-studio-<sha>.jsonl``: the
export's hash names it, so importing the same export again writes nothing), the quarantine beside it
(``labels/_quarantine/label-studio-<sha>.jsonl``). The checker's verdict on a label is the one the queue recorded,
never the export's copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import logging
from collections import Counter

from aigc.evaluate.review import read_labels
from aigc.evaluate.runs import evaluation_prefix
from aigc.lake import Lake, key_in
from aigc.lake.base import ObjectNotFound, PreconditionFailed
from aigc.lake.keys import join

log = logging.getLogger(__name__)
VERDICT, RIGHT, WRONG = "verdict", "right", "wrong"
ATTRIBUTE = "attribute_"
"""The name of an attribute's choice: ``attribute_colour``."""
MAX_EXPORT_BYTES = 64 * 1024 * 1024
"""A Label Studio export larger than this is refused before it is read (a review round is hundreds of tasks)."""
SOURCE = "label-studio"
INBOX_RECORD = "_inbox.json"
"""Beside the labels: each inbox export's version when it was last imported or refused (``import_pending``)."""


def inbox(model: str) -> str:
    """Where reviewers drop Label Studio exports for ``import_pending``: ``review/<model>/inbox/``."""
    return join("review", model, "inbox")


def import_pending(lake: Lake, model: str) -> dict:
    """Every Label Studio export (``*.json``) in the model's inbox that was not imported yet, imported in name
    order (``import_export``; an export imported before writes nothing); a file that is no export is reported with
    why and the others still imported. The export files stay: they are the reviewers', not the pipeline's, and
    accumulate, so the version of each one imported or refused is recorded (``_inbox.json``) and an unchanged one
    is not read again (a lost record only costs a re-read: the import is idempotent)."""
    record_key = join("evaluations", model, "labels", INBOX_RECORD)
    done = lake.get_json(record_key) if lake.exists(record_key) else {}
    listing = [(k, v) for k, _size, v in lake.list_versions(inbox(model)) if k.endswith(".json")]
    found: dict[str, dict] = {}
    for key, version in listing:
        if done.get(key) == version:
            continue
        try:
            found[lake.url(key)] = import_export(lake, model, key)
        except BadExport as e:  # the same bytes are refused the same way: recorded, not read again
            found[lake.url(key)] = {"refused": str(e)}
        except Exception as e:  # noqa: BLE001 - one reviewer's bad file must not stop the evaluation that imports
            found[lake.url(key)] = {"refused": f"{type(e).__name__}: {e}"}
            log.warning("Label Studio export %s not imported: %s", lake.url(key), e)
            continue  # perhaps transient: tried again next time
        done[key] = version
    if found:
        lake.put_json(record_key, done)
    new = [x for x in found.values() if x.get("already_imported") is False]
    return {"exports": len(listing), "unchanged": len(listing) - len(found), "imported": len(new),
            "labels": sum(x["labels"] for x in new), "refused": sum("refused" in x for x in found.values()),
            "by_export": found}


def queue_key(model: str, date: str, run_id: str) -> str:
    return join(evaluation_prefix(model, date, run_id), "review", "queue.jsonl")


def read_queue(lake: Lake, model: str, date: str, run_id: str) -> dict[str, dict]:
    """An evaluation run's review queue by prompt id (the lines its evaluation wrote)."""
    return {line["prompt_id"]: line for line in (json.loads(x) for x in
                                                 lake.get_bytes(queue_key(model, date, run_id)).splitlines() if x)}


def label_config(output: str, attributes: list[str]) -> str:
    """Label Studio's labelling config for these tasks: the prompt, the output (an image or a text), the verdict
    (required) and one optional choice per attribute."""
    shown = '<Image name="output" value="$image"/>' if output == "image" else '<Text name="output" value="$text"/>'

    def choices(name: str, required: bool, title: str) -> str:
        name, title = html.escape(name, quote=True), html.escape(title, quote=True)
        return (f'  <Header value="{title}" size="6"/>\n  <Choices name="{name}" toName="output" choice="single" '
                f'showInLine="true" required="{str(required).lower()}">\n    <Choice value="{RIGHT}"/>\n'
                f'    <Choice value="{WRONG}"/>\n  </Choices>\n')
    own = "".join(choices(ATTRIBUTE + a, False, f"{a} (optional)") for a in attributes)
    return (f'<View>\n  <Header value="$prompt"/>\n  {shown}\n{choices(VERDICT, True, "the output, for its prompt")}'
            f'{own}</View>\n')


def _choice(name: str, right: bool) -> dict:
    return {"from_name": name, "to_name": "output", "type": "choices",
            "value": {"choices": [RIGHT if right else WRONG]}}


def export_queue(lake: Lake, model: str, date: str, run_id: str, image_base: str | None = None) -> dict:
    """The run's review queue as Label Studio tasks and their labelling config, written beside the queue.
    ``image_base``: what an image's lake key is appended to for a URL Label Studio can fetch (the AIGC view's
    ``<base_url>/aigc/lake/``, or a bucket's HTTP endpoint); none: the lake's own URL (``s3://``, which Label
    Studio reads through a cloud storage the user connects)."""
    queue = read_queue(lake, model, date, run_id)
    prefix = join(evaluation_prefix(model, date, run_id), "review", "label-studio")
    output = "image" if any("image" in line for line in queue.values()) else "text"
    attributes = sorted({a for line in queue.values() for a in (line.get("checker_attributes") or {})})
    tasks = []
    for prompt_id, line in queue.items():
        shown = line.get("image") if output == "image" else line.get("text")
        if output == "image" and image_base and shown:
            shown = image_base.rstrip("/") + "/" + key_in(lake, shown)
        data = {"model": model, "date": date, "run_id": run_id, "prompt_id": prompt_id,
                "prompt": line.get("prompt") or line.get("prompt_tail") or "", output: shown}
        checker = line.get("checker_correct")
        predictions = [] if checker is None else [{"model_version": "checker", "result": [
            _choice(VERDICT, checker), *(_choice(ATTRIBUTE + a, v) for a, v in
                                         sorted((line.get("checker_attributes") or {}).items()))]}]
        tasks.append({"data": data, "predictions": predictions})
    lake.put_bytes(join(prefix, "tasks.json"), json.dumps(tasks, indent=1).encode())
    lake.put_bytes(join(prefix, "label-config.xml"), label_config(output, attributes).encode())
    return {"tasks": len(tasks), "tasks_uri": lake.url(join(prefix, "tasks.json")),
            "label_config_uri": lake.url(join(prefix, "label-config.xml")), "output": output,
            "attributes": attributes}


class BadExport(ValueError):
    """A file that is not a Label Studio JSON export at all (too large, not JSON, not a list of tasks)."""


def _verdicts(annotation) -> dict[str, bool] | str:
    """An annotation's verdicts (True: right): the output's (``verdict``) and any attribute's, or why it is not
    a label."""
    if not isinstance(annotation, dict) or not isinstance(annotation.get("result"), list):
        return "an annotation without a result list"
    found: dict[str, bool] = {}
    for r in annotation["result"]:
        name = r.get("from_name") if isinstance(r, dict) else None
        if name != VERDICT and not (isinstance(name, str) and name.startswith(ATTRIBUTE)):
            continue  # a control of the user's own: not ours to read
        value = r.get("value")
        choices = value.get("choices") if isinstance(value, dict) else None
        if r.get("type") != "choices" or not isinstance(choices, list) or len(choices) != 1 \
                or choices[0] not in (RIGHT, WRONG):
            return f"{name} is not one of {RIGHT!r} or {WRONG!r}: {json.dumps(value)[:200]}"
        if name in found:
            return f"{name} is given twice in one annotation"
        found[name] = choices[0] == RIGHT
    if VERDICT not in found:
        return f"no {VERDICT!r} choice (the output's verdict is the label; the attributes are optional)"
    return found


def import_export(lake: Lake, model: str, key: str) -> dict:
    """A Label Studio JSON export at ``key`` (in the lake) read into the model's labels; see the module's doc."""
    size = lake.size(key)
    if size > MAX_EXPORT_BYTES:
        raise BadExport(f"{lake.url(key)} is {size} bytes, more than a Label Studio export of review tasks may be "
                        f"({MAX_EXPORT_BYTES}, aigc.evaluate.labelstudio.MAX_EXPORT_BYTES): export one project's "
                        f"tasks, or split it")
    data = lake.get_bytes(key)
    try:
        tasks = json.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's depth
        raise BadExport(f"{lake.url(key)} is not JSON ({e}): export the project as JSON (Label Studio's Export → "
                        f"JSON), not JSON-MIN or CSV") from e
    if not isinstance(tasks, list):
        raise BadExport(f"{lake.url(key)} holds a JSON {type(tasks).__name__}, not a list of tasks: export the "
                        f"project as JSON (Label Studio's Export → JSON)")
    digest = hashlib.sha256(data).hexdigest()[:16]
    labels = join("evaluations", model, "labels", f"{SOURCE}-{digest}.jsonl")
    held = join("evaluations", model, "labels", "_quarantine", f"{SOURCE}-{digest}.jsonl")
    written = {k: lake.url(k) if lake.exists(k) else None for k in (labels, held)}
    if any(written.values()):  # this export, imported before: its files say what it gave
        return {"tasks": len(tasks), "already_imported": True, "labels_uri": written[labels],
                "quarantine_uri": written[held]}
    seen = {(str(x.get("run_id")), str(x.get("prompt_id"))) for x in read_labels(lake, model)[0]}
    queues: dict[tuple[str, str], dict | None] = {}
    accepted, quarantined, cancelled = [], [], 0

    def refuse(n: int, task, reason: str, detail: str) -> None:
        quarantined.append({"task_index": n, "reason": reason, "detail": detail, "task": task})

    for n, task in enumerate(tasks):
        d = task.get("data") if isinstance(task, dict) else None
        ids = isinstance(d, dict) and (d.get("model"), d.get("date"), d.get("run_id"), d.get("prompt_id"))
        if not ids or not all(isinstance(x, str) and x for x in ids):
            refuse(n, task, "unknown_task", "its data names no run and prompt: not a task aigc review exported")
            continue
        if ids[0] != model:
            refuse(n, task, "unknown_task", f"a task of model {ids[0]!r}, imported for {model!r}")
            continue
        run = ids[1:3]
        if run not in queues:
            try:  # the date and run id are the export's: checked as lake key parts before any read
                queues[run] = read_queue(lake, model, *run)
            except (ObjectNotFound, ValueError):  # none there; a date or run id no key may hold (LakeKeyError)
                queues[run] = None
        queued = (queues[run] or {}).get(ids[3])
        if queued is None:
            refuse(n, task, "unknown_task", f"run {run[1]} of {run[0]} queued no prompt {ids[3]!r} for review")
            continue
        given, malformed = [], []
        annotations = task.get("annotations") or []
        if not isinstance(annotations, list):
            refuse(n, task, "malformed_annotation", f"its annotations are a {type(annotations).__name__}, not a list")
            continue
        for annotation in annotations:
            if isinstance(annotation, dict) and annotation.get("was_cancelled"):
                cancelled += 1
                continue
            found = _verdicts(annotation)
            (malformed.append(found) if isinstance(found, str) else given.append(found))
        said = {name: {g[name] for g in given if name in g} for name in {k for g in given for k in g}}
        disagree = sorted(name for name, values in said.items() if len(values) > 1)
        if malformed:
            refuse(n, task, "malformed_annotation", "; ".join(malformed))
        elif disagree:
            refuse(n, task, "conflicting_labels", f"its annotations say both right and wrong on {', '.join(disagree)}")
        elif not given:
            continue  # not labelled yet (or only cancelled): nothing to import, nothing wrong
        elif (run[1], ids[3]) in seen:
            refuse(n, task, "duplicate_label", f"prompt {ids[3]!r} of run {run[1]} was labelled by an earlier import")
        else:
            seen.add((run[1], ids[3]))
            annotators = sorted({str(a.get("completed_by")) for a in annotations
                                 if isinstance(a, dict) and not a.get("was_cancelled")})
            accepted.append({"run_id": run[1], "date": run[0], "prompt_id": ids[3], "prompt": queued.get("prompt"),
                             "checker_correct": queued.get("checker_correct"),
                             "human_correct": said[VERDICT].pop(),
                             "checker_attributes": queued.get("checker_attributes") or {},
                             "human_attributes": {k.removeprefix(ATTRIBUTE): v.pop() for k, v in sorted(said.items())
                                                  if k != VERDICT},
                             "selection": queued.get("selection"), "source": SOURCE, "annotators": annotators,
                             "export": lake.url(key),
                             "task_id": task.get("id")})
    # The quarantine first: a crash between the two writes leaves no labels file, so a retry imports it all again.
    for where, lines in ((held, quarantined), (labels, accepted)):
        if lines:
            # An import beside this one may have written the same export's files first: the same content.
            with contextlib.suppress(PreconditionFailed):
                lake.put_if_absent(where, "".join(json.dumps(x) + "\n" for x in lines).encode())
    return {"tasks": len(tasks), "already_imported": False, "labels": len(accepted), "cancelled": cancelled,
            "quarantined": dict(Counter(q["reason"] for q in quarantined)),
            "labels_uri": lake.url(labels) if accepted else None,
            "quarantine_uri": lake.url(held) if quarantined else None}

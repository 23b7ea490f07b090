#!/usr/bin/env python3
"""Renders CronJob-made Jobs as a table, for deploy/local/demo.

Usage: kubectl get jobs -n demo -o json | deploy/local/jobtable.py [--max-rows N]

Reads a JobList (or a single Job, or a JSON array of Jobs) on stdin and prints
one row per Job:

  CRONJOB    the controller ownerReference's name ("-" if none)
  JOB        the Job's name
  SCHEDULED  annotation batch.kubernetes.io/cronjob-scheduled-timestamp, as
             written (RFC 3339, in the CronJob's time zone)
  CREATED    metadata.creationTimestamp (UTC)
  SKEW       CREATED - SCHEDULED in whole seconds; creationTimestamp has 1 s
             resolution (truncated), so 0 means created within the second
  STATUS     Complete / Failed (conditions), Terminating (being deleted),
             Suspended, else Running
  BY         the shardcron replica that created the Job (annotation
             shardcron.io/created-by; "-" for another controller)

A NAMESPACE column is added when the Jobs come from more than one namespace.
Rows are grouped by CronJob, oldest slot first. With --max-rows N only the N
newest Jobs (by scheduled time) are shown and a last line counts the rest.
Python 3 standard library only.
"""

import argparse
import json
import sys
from datetime import datetime, timezone

SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
CREATED_BY_ANNOTATION = "shardcron.io/created-by"


def parse_time(text):
    """Parses an RFC 3339 timestamp into an aware datetime; None if absent or bad."""
    if not text:
        return None
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed


def controller_name(job):
    for ref in job.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("name") or "-"
    return "-"


def condition_true(job, kind):
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return True
    return False


def status(job):
    if condition_true(job, "Complete"):
        return "Complete"
    if condition_true(job, "Failed"):
        return "Failed"
    if job.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    if condition_true(job, "Suspended"):
        return "Suspended"
    return "Running"


def format_utc(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def skew(created, scheduled):
    if created is None or scheduled is None:
        return "-"
    seconds = (created - scheduled).total_seconds()
    # Both are whole seconds in practice; round rather than truncate anyway.
    return "%+ds" % round(seconds)


def row(job):
    meta = job.get("metadata") or {}
    scheduled_text = (meta.get("annotations") or {}).get(SCHEDULED_ANNOTATION)
    scheduled = parse_time(scheduled_text)
    created = parse_time(meta.get("creationTimestamp"))
    return {
        "NAMESPACE": meta.get("namespace") or "-",
        "CRONJOB": controller_name(job),
        "JOB": meta.get("name") or "-",
        "SCHEDULED": scheduled_text or "-",
        "CREATED": format_utc(created) if created else "-",
        "SKEW": skew(created, scheduled),
        "STATUS": status(job),
        "BY": (meta.get("annotations") or {}).get(CREATED_BY_ANNOTATION) or "-",
        # Sort keys, not printed.
        "_scheduled": scheduled or created,
    }


def jobs_of(document):
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        if "items" in document:
            return document.get("items") or []
        if document.get("kind") == "Job":
            return [document]
    raise ValueError("expected a JobList, a Job or a JSON array of Jobs")


def render(jobs, max_rows=None):
    rows = [row(j) for j in jobs]
    if not rows:
        return "No Jobs yet.\n"
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    hidden = 0
    if max_rows is not None and len(rows) > max_rows:
        rows.sort(key=lambda r: r["_scheduled"] or epoch, reverse=True)
        hidden = len(rows) - max_rows
        rows = rows[:max_rows]
    rows.sort(key=lambda r: (r["NAMESPACE"], r["CRONJOB"], r["_scheduled"] or epoch, r["JOB"]))

    columns = ["CRONJOB", "JOB", "SCHEDULED", "CREATED", "SKEW", "STATUS", "BY"]
    if len({r["NAMESPACE"] for r in rows}) > 1:
        columns.insert(0, "NAMESPACE")
    right = {"SKEW"}
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}

    def line(values):
        cells = [
            values[c].rjust(widths[c]) if c in right else values[c].ljust(widths[c])
            for c in columns
        ]
        return "  ".join(cells).rstrip()

    out = [line({c: c for c in columns})]
    out.extend(line(r) for r in rows)
    if hidden:
        out.append("... and %d older Job%s" % (hidden, "" if hidden == 1 else "s"))
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Render `kubectl get jobs -o json` (stdin) as a table of CronJob firings."
    )
    parser.add_argument("--max-rows", type=int, default=None, metavar="N",
                        help="show only the N newest Jobs")
    args = parser.parse_args(argv)
    if args.max_rows is not None and args.max_rows < 1:
        parser.error("--max-rows must be at least 1")
    try:
        document = json.load(sys.stdin)
        jobs = jobs_of(document)
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        print("jobtable: cannot read Jobs from stdin: %s" % err, file=sys.stderr)
        return 2
    sys.stdout.write(render(jobs, args.max_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

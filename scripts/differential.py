#!/usr/bin/env python3
"""Differential check against the reference engine: random scenarios, run by both, compared.

Usage:
    python3 scripts/differential.py --bundle /tmp/reference.mjs [--penguin target/release/penguin]
        [--seeds 1-100] [--out target/differential]

Each seed makes one scenario (scenario-format.md): up to four model requests with thinking,
text and up to three tool calls each, scripted tool outputs (completed, failed, or a bare
complete output), denials, failed/timeout/malformed requests that reconnect, and, for half of
them, an abort (before anything, or while the first request's tools run) and a steer; slow
approvals, approvers that fail, calls with no script, segments a script leaves open, auth and
permanent failures, and a turn limit now and then; and for two in five, version
2: compaction (by turns, by context length, or a `compact` run), a background notice, the
session's head records (compared strictly). Both
engines run it (`penguin scenario run`, `../shared/tools/reference/driver.mjs`) and
`../shared/tools/compare-scenario.py` compares the stream, trace and requests. Exit status 1 when
any seed differs; its files stay in --out.

The reference runs on real time, so the scenarios keep every event another producer could race
with at least ~100 ms away: each tool call of a request streams in a window of its own (100-160
ms, 400-460 ms, 700-760 ms after dispatch), and the abort or steer lands at 330 ms, between the
first request's first two windows (none of its calls is denied or left without a script). A difference is still worth a second run before it is
believed: a loaded machine can slow the reference enough to move an event across a boundary.
Build the bundle with `../shared/tools/reference/build.sh`.
"""
import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def mm(payload):
    return {"type": "model_msg", "payload": payload}


def segment(kind, key, text):
    """A streamed segment: start, deltas of up to 4 chars, stop, then the complete message."""
    base = {"type": f"partial_{kind}", "role": "assistant"}
    steps = [mm({**base, "event_type": "start", key: "", "stop_reason": "completed"})]
    for i in range(0, len(text), 4):
        steps.append(mm({**base, "event_type": "delta", key: text[i:i + 4], "stop_reason": "completed"}))
    steps.append(mm({**base, "event_type": "stop", key: "", "stop_reason": "completed"}))
    steps.append(mm({"type": kind, "role": "assistant", key: text, "stop_reason": "completed"}))
    return steps


def tool_call(name, args, cid):
    call = {"role": "assistant", "tool_call_id": cid, "stop_reason": "completed"}
    return [
        mm({"type": "partial_tool_call", **call, "event_type": "start", "name": name, "arguments": ""}),
        mm({"type": "partial_tool_call", **call, "event_type": "delta", "name": "", "arguments": args}),
        mm({"type": "partial_tool_call", **call, "event_type": "stop", "name": "", "arguments": ""}),
        mm({"type": "tool_call", "role": "assistant", "name": name, "arguments": args,
            "tool_call_id": cid, "stop_reason": "completed"}),
    ]


def tool_script(r, cid, window):
    """A tool's output, streamed in its own window (see the module's introduction)."""
    out = {"role": "user", "tool_call_id": cid}
    text = r.choice(["alpha", "beta gamma", ""])
    end = r.choice(["completed", "completed", "failed", None])
    steps = [(100 + 300 * window, mm({"type": "partial_tool_call_output", **out, "event_type": "start",
                                      "output": "", "stop_reason": "completed"}))]
    if text:
        steps.append((20, mm({"type": "partial_tool_call_output", **out, "event_type": "delta",
                              "output": text, "stop_reason": "completed"})))
    if end:
        steps.append((20, mm({"type": "partial_tool_call_output", **out, "event_type": "stop",
                              "output": "", "stop_reason": end})))
        steps.append((20, mm({"type": "tool_call_output", **out, "output": text, "stop_reason": end})))
    else:
        # A complete output with no segment around it.
        steps.append((20, mm({"type": "tool_call_output", **out, "output": text or "x",
                              "stop_reason": "completed"})))
    return {"stream": [{"delay_ms": d, "message": m} for d, m in steps]}


def scenario(seed):
    r = random.Random(seed)
    timed = r.random() < 0.5
    requests = r.randint(2, 4) if timed else r.randint(1, 4)
    llm, tools, decisions, total = [], {}, {}, 0
    for q in range(requests):
        steps = []
        if r.random() < 0.5:
            steps += segment("thinking", "thinking", r.choice(["Think.", "Let me see the files.", "Hmm"]))
        if r.random() < 0.7:
            steps += segment("text", "text", r.choice(["Reading.", "Here is the answer you asked for.", "Ok"]))
        elif r.random() < 0.3:
            # A text segment the script leaves open: the runner closes it with the outcome.
            steps += segment("text", "text", "Cut sho")[:-2]
        last = q == requests - 1
        calls = 0 if last else r.randint(0, 3)
        if q == 0 and timed:
            calls = max(calls, 2)
        for i in range(calls):
            cid = f"call_{q}_{i}"
            steps += tool_call(r.choice(["read_file", "exec_command"]), json.dumps({"path": f"f{i}.txt"}), cid)
            # The first request's calls of a timed scenario all run: their windows are what
            # keeps its abort or steer apart from everything else.
            if not (q == 0 and timed):
                roll = r.random()
                if roll < 0.15:
                    decisions[cid] = "deny"
                elif roll < 0.2:
                    decisions[cid] = "throw"  # the approver fails: a denial
                elif roll < 0.3 and not timed:
                    # A slow approver delays this call and every later one alike.
                    decisions[cid] = {"decision": "allow", "delay_ms": 30}
            if not (q == 0 and timed) and r.random() < 0.1:
                continue  # no script: the call gets "unscripted tool call"
            tools[cid] = tool_script(r, cid, i)
        entry = {"stream": [{"delay_ms": 2, "message": m} for m in steps]}
        if not last and r.random() < 0.15:
            entry["outcome"] = {"status": r.choice(["failed", "timeout", "malformed", "auth"]), "message": "boom"}
            if r.random() < 0.3:
                entry["outcome"]["permanent"] = True
        else:
            out = r.randint(1, 9)
            total += 100 + out
            entry["stream"].append({"delay_ms": 5, "message": {"type": "event_msg", "payload": {
                "type": "token_usage",
                "session": {"cache_read": 0, "cache_write": 0, "output": out, "total": total},
                "request": {"cache_read": 0, "cache_write": 0, "output": out, "total": 100 + out}}}})
        llm.append(entry)
    runs = [{"input": [mm({"type": "text", "role": "user", "text": "go"})]}]
    if timed and r.random() < 0.6:
        runs[0]["abort_after_ms"] = r.choice([1, 330])
        runs.append({"input": [mm({"type": "text", "role": "user", "text": "again"})]})
    if timed and r.random() < 0.6:
        runs[0]["steer"] = [{"after_ms": 330, "input": [mm({"type": "text", "role": "user", "text": "also this"})]}]
    engine = {"max_reconnects": 2, "reconnect_backoff_ms": 60, "reconnect_backoff_max_ms": 200,
              "max_turns": r.choice([-1, -1, -1, 1, 2])}
    found = {
        "description": f"differential seed {seed}",
        "engine": engine,
        "approvals": {"default": "allow", "by_id": decisions},
        "llm": llm,
        "tools": tools,
        "runs": runs,
    }
    if r.random() < 0.4:
        version_2(r, found, timed)
    return found


def version_2(r, found, timed):
    """Compaction (by turns, by context length, or asked for), notices and the session's head
    records. Compaction requests take the next `llm` entries like any request, so a few plain
    answers are added for them (unused ones are left alone by both engines)."""
    found["engine"]["compaction"] = {
        "mode": r.choice(["summarize", "discard"]),
        "max_session_turns": r.choice([0, 0, 1, 2]),
        "max_context_length": r.choice([0, 0, 250, 450]),
        "prompt": "Summarize the conversation so far as [summary]...[/summary].",
    }
    if r.random() < 0.5:
        found["engine"]["compaction_max_reconnects"] = r.choice([0, 1])
    for _ in range(r.randint(1, 2)):
        found["llm"].append({"stream": [{"delay_ms": 2, "message": m}
                                        for m in segment("text", "text", "[summary]so far[/summary]")]})
    if r.random() < 0.6:
        found["session"] = {
            "session_meta": {"type": "session_meta", "payload": {
                "session_id": "session-x", "provider": "scripted", "model_id": "scenario",
                "model_context_window": 128000, "system_prompt": "", "agent_state": "/s", "workspace": "/w"}},
            "tool_list": {"type": "event_msg", "payload": {"type": "tool_list_ready", "tools": []}},
            "bootstrap_records": [] if r.random() < 0.5 else [
                {"type": "event_msg", "payload": {"type": "mcp_connect_begin", "servers": ["files"]}},
                {"type": "event_msg", "payload": {"type": "mcp_connect_end", "status": "completed", "results": [
                    {"server": "files", "transport": "stdio", "status": "completed", "duration_ms": 12,
                     "tools": ["read"]}]}}],
        }
    runs = found["runs"]
    if r.random() < 0.5:
        notice = mm({"type": "text", "role": "user", "sender": "harness",
                     "text": "[background_task_done]\nkind: command\nid: proc_1\nstatus: completed\n[/background_task_done]"})
        runs[0]["notices"] = [{"after_ms": 330 if timed else 0, "message": notice}]
    if r.random() < 0.3:
        runs.append({"compact": True})
        runs.append({"input": [mm({"type": "text", "role": "user", "text": "after"})]})


def run(cmd, stdout, stderr):
    with open(stdout, "w") as out, open(stderr, "w") as err:
        return subprocess.run(cmd, stdout=out, stderr=err).returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True, help="the reference bundle (build.sh's output)")
    ap.add_argument("--penguin", default=str(ROOT / "target/release/penguin"))
    ap.add_argument("--seeds", default="1-100", help="FIRST-LAST")
    ap.add_argument("--out", default=str(ROOT / "target/differential"))
    args = ap.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    driver = SHARED / "tools/reference/driver.mjs"
    compare = SHARED / "tools/compare-scenario.py"
    differ = []
    for seed in range(first, last + 1):
        path = out / f"s{seed}.json"
        path.write_text(json.dumps(scenario(seed)))
        ours, ref = out / f"our{seed}", out / f"ref{seed}"
        for prefix, cmd in [
            (ours, [args.penguin, "scenario", "run", str(path)]),
            (ref, ["node", str(driver), args.bundle, str(path)]),
        ]:
            cmd += ["--trace", f"{prefix}.trace.jsonl", "--requests", f"{prefix}.req.jsonl"]
            if run(cmd, f"{prefix}.stream.jsonl", f"{prefix}.err") != 0:
                print(f"seed {seed}: {cmd[0]} failed, see {prefix}.err")
                differ.append(seed)
                break
        else:
            # Version 2 scenarios count the session's head records too.
            strict = ["--strict"] if "session" in json.loads(path.read_text()) else []
            result = subprocess.run([sys.executable, str(compare), str(ref), str(ours), *strict],
                                    capture_output=True, text=True)
            if result.returncode != 0:
                print(f"seed {seed} differs:\n{result.stdout.strip()}")
                differ.append(seed)
                continue
            path.unlink()
            for prefix in (ours, ref):
                for kind in ("stream.jsonl", "trace.jsonl", "req.jsonl", "err"):
                    Path(f"{prefix}.{kind}").unlink(missing_ok=True)
    checked = last - first + 1
    print(f"{checked - len(differ)} of {checked} scenarios agree" + (f"; differing seeds: {differ}" if differ else ""))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()

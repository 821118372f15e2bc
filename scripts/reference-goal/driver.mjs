// The reference driver of shared/tools/reference (driver.mjs), with goal runs: `runs[].goal`
// ({budget, max_rounds, file, writes}, docs/scenario-format.md) runs the reference's goal loop
// (runGoalLoop, bundled by build.sh here) over the engine; the scripted tools write GOAL.yaml
// for the calls `writes` names, and the real file's path reads as `file` in every output.
// Runs one scenario (see shared/spec/scenario-format.md) through a reference engine bundle
// and writes the same three observables the project's `penguin scenario run` writes:
// the stream (stdout, JSONL), the trace (--trace FILE, JSONL) and the LLM requests (--requests FILE).
// Usage: node upstream-driver.mjs BUNDLE.mjs SCENARIO.json --trace T.jsonl --requests R.jsonl
import { readFileSync, writeFileSync, mkdtempSync, rmSync, unlinkSync } from "node:fs";
import { resolve, join } from "node:path";
import { tmpdir } from "node:os";
import { pathToFileURL } from "node:url";

const [bundlePath, scenarioPath, ...rest] = process.argv.slice(2);
const opt = (name) => { const i = rest.indexOf(name); return i >= 0 ? rest[i + 1] : undefined; };
const up = await import(pathToFileURL(resolve(bundlePath)).href);
const sc = JSON.parse(readFileSync(scenarioPath, "utf8"));
const now = () => new Date().toISOString();
const stamp = (m) => ({ timestamp: now(), ...m });

// Abortable sleep: resolves true when the time passed, false when the signal fired first.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const t = setTimeout(() => { signal?.removeEventListener("abort", on); resolve(true); }, ms);
    const on = () => { clearTimeout(t); resolve(false); };
    signal?.addEventListener("abort", on, { once: true });
  });
}

const PARTIAL_FIELD = { partial_text: "text", partial_thinking: "thinking", partial_tool_call: "arguments", partial_tool_call_output: "output" };
const COMPLETE_OF = { partial_text: "text", partial_thinking: "thinking", partial_tool_call: "tool_call", partial_tool_call_output: "tool_call_output" };

// Tracks open partial segments of one producer so an abort can close them (start → … → stop → complete).
function segmentTracker() {
  const open = new Map();
  return {
    see(m) {
      const p = m.payload;
      if (!p || !(p.type in PARTIAL_FIELD)) return;
      const key = `${p.type}::${p.tool_call_id ?? ""}`;
      if (p.event_type === "start") open.set(key, { p, buf: p[PARTIAL_FIELD[p.type]] ?? "" });
      else if (p.event_type === "delta") { const s = open.get(key); if (s) s.buf += p[PARTIAL_FIELD[p.type]] ?? ""; }
      else if (p.event_type === "stop") open.delete(key);
    },
    *close(reason) {
      for (const { p, buf } of open.values()) {
        const field = PARTIAL_FIELD[p.type];
        const stop = { ...p, event_type: "stop", [field]: "", stop_reason: reason };
        if (p.type === "partial_tool_call") stop.name = "";
        yield stamp({ type: "model_msg", payload: stop });
        const complete = { type: COMPLETE_OF[p.type], role: p.role, [field === "arguments" ? "arguments" : field]: buf, stop_reason: reason };
        if (p.type === "partial_tool_call") { complete.name = p.name; complete.tool_call_id = p.tool_call_id; }
        if (p.type === "partial_tool_call_output") complete.tool_call_id = p.tool_call_id;
        yield stamp({ type: "model_msg", payload: complete });
      }
      open.clear();
    },
  };
}

const requests = [];
// The running goal: its real GOAL.yaml, the path shown instead, the writes by tool_call_id.
let goal = null;
const shownPaths = [];
const shown = (s) => shownPaths.reduce((acc, [real, shownAs]) => acc.split(real).join(shownAs), s);
let llmIndex = 0;
const llm = {
  async *streamGenerate({ newMessages, signal }) {
    requests.push({ input: newMessages.map(({ timestamp, ...m }) => m) });
    const script = sc.llm[llmIndex++];
    if (!script) return { status: "failed", errorMessage: "scenario has no script for this request" };
    const seg = segmentTracker();
    for (const step of script.stream ?? []) {
      if ((step.delay_ms ?? 0) > 0 ? !(await sleep(step.delay_ms, signal)) : signal?.aborted) { yield* seg.close("aborted"); return { status: "aborted" }; }
      const m = stamp(step.message);
      seg.see(m);
      yield m;
    }
    if (signal?.aborted) { yield* seg.close("aborted"); return { status: "aborted" }; }
    const o = script.outcome ?? { status: "completed" };
    yield* seg.close(o.status);
    return { status: o.status, ...(o.message ? { errorMessage: o.message } : {}), ...(o.permanent ? { permanent: true } : {}) };
  },
};

const environment = {
  async listTools() { return []; },
  toolPermission() { return "rw"; },
  async *executeTool({ toolCall, signal }) {
    const id = toolCall.payload.tool_call_id;
    if (goal && id in goal.writes) {
      const text = goal.writes[id];
      try { if (text === null) unlinkSync(goal.real); else writeFileSync(goal.real, text); } catch {}
    }
    const script = (sc.tools ?? {})[id];
    if (!script) { yield stamp({ type: "model_msg", payload: { type: "tool_call_output", role: "user", output: "unscripted tool call", tool_call_id: id, stop_reason: "failed" } }); return; }
    const seg = segmentTracker();
    let buf = "";
    for (const step of script.stream ?? []) {
      if ((step.delay_ms ?? 0) > 0 ? !(await sleep(step.delay_ms, signal)) : signal?.aborted) {
        const partials = [...seg.close("aborted")];
        if (partials.length) { yield* partials; return; }
        yield stamp({ type: "model_msg", payload: { type: "tool_call_output", role: "user", output: buf, tool_call_id: id, stop_reason: "aborted" } });
        return;
      }
      const m = stamp(step.message);
      seg.see(m);
      if (m.payload?.type === "partial_tool_call_output") buf += m.payload.output ?? "";
      yield m;
    }
  },
};

const traceLines = [];
const traceDir = opt("--trace-dir");
const fileTrace = traceDir ? new up.TraceWriter({ tracesDir: traceDir, sessionId: "session-perf" }) : null;
const trace = fileTrace ?? { async write(m) { if (m.payload?.type?.startsWith("partial_") || m.origin?.length) return; traceLines.push(m); }, async rotate() { traceLines.push({ type: "trace_rotate" }); } };

const e = sc.engine ?? {};
// Background notices: a queue the engine drains at its input-assembly points (runs[].notices feed it).
const noticeQueue = [];
const backgroundNotices = { drain() { return noticeQueue.splice(0); }, pending() { return noticeQueue.length; } };
const c = e.compaction;
const ss = sc.session ?? {};
const engine = new up.ContextEngine({
  llm, environment, trace, backgroundNotices,
  maxTurns: e.max_turns ?? -1,
  maxReconnects: e.max_reconnects ?? 5,
  reconnectBackoffMs: e.reconnect_backoff_ms ?? 2000,
  reconnectBackoffMaxMs: e.reconnect_backoff_max_ms ?? 30000,
  ...(e.compaction_max_reconnects !== undefined ? { compactionMaxReconnects: e.compaction_max_reconnects } : {}),
  ...(c ? {
    createLLM: () => llm,
    compaction: { maxContextLength: c.max_context_length ?? 0, maxSessionTurns: c.max_session_turns ?? 0, mode: c.mode ?? "summarize", prompt: c.prompt ?? "Summarize the conversation so far." },
  } : {}),
  ...(ss.session_meta ? { sessionMeta: stamp(ss.session_meta) } : {}),
  ...(ss.tool_list ? { toolList: stamp(ss.tool_list) } : {}),
  ...(ss.bootstrap_records ? { bootstrapRecords: ss.bootstrap_records.map(stamp) } : {}),
});

const a = sc.approvals;
const approve = a === undefined ? undefined : async (tc) => {
  const id = tc.payload.tool_call_id;
  let d = (a.by_id ?? {})[id] ?? a.default ?? "deny";
  if (typeof d === "object") { await sleep(d.delay_ms ?? 0); d = d.decision; }
  if (d === "throw") throw new Error("approver failed");
  return d;
};

let pending = "";
const emit = (m) => { pending += shown(JSON.stringify(m)) + "\n"; if (pending.length > 1 << 16) { process.stdout.write(pending); pending = ""; } };
for (const run of sc.runs ?? [{ input: [] }]) {
  const ac = new AbortController();
  const timers = [];
  if (run.abort_after_ms !== undefined) timers.push(setTimeout(() => ac.abort(), run.abort_after_ms));
  for (const s of run.steer ?? []) timers.push(setTimeout(() => engine.steer(s.input.map(stamp)), s.after_ms));
  for (const n of run.notices ?? []) {
    if ((n.after_ms ?? 0) <= 0) noticeQueue.push(stamp(n.message));
    else timers.push(setTimeout(() => noticeQueue.push(stamp(n.message)), n.after_ms));
  }
  let gen;
  if (run.goal) {
    const dir = mkdtempSync(join(tmpdir(), "ref-goal-"));
    goal = { dir, real: join(dir, "GOAL.yaml"), writes: run.goal.writes ?? {} };
    shownPaths.push([goal.real, run.goal.file ?? "/scratchpad/session/GOAL.yaml"]);
    // As Session.runGoal: the input's user texts, joined, are the objective's text.
    const text = run.input.map((m) => m.payload.text).join("\n").trim();
    const opts = { ...(approve ? { approve } : {}), signal: ac.signal };
    gen = up.runGoalLoop({ run: (msgs) => engine.run(msgs, opts) }, {
      text, goalFilePath: goal.real, budget: run.goal.budget ?? -1,
      ...(run.goal.max_rounds !== undefined ? { maxRounds: run.goal.max_rounds } : {}), signal: ac.signal,
    });
  } else {
    gen = run.compact ? engine.compact({ signal: ac.signal }) : engine.run(run.input.map(stamp), { ...(approve ? { approve } : {}), signal: ac.signal });
  }
  for await (const m of gen) {
    // As Session.runGoal: the goal's end is written to the Trace too.
    if (run.goal && m.payload?.type === "goal_finished") await trace.write(m);
    emit(m);
  }
  if (goal) { rmSync(goal.dir, { recursive: true, force: true }); goal = null; }
  timers.forEach(clearTimeout);
}
process.stdout.write(pending);
if (opt("--trace")) writeFileSync(opt("--trace"), traceLines.map((m) => shown(JSON.stringify(m))).join("\n") + "\n");
if (opt("--requests")) writeFileSync(opt("--requests"), requests.map((r) => shown(JSON.stringify(r))).join("\n") + "\n");

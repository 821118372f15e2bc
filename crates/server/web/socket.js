// An EventSource over a WebSocket.
//
// A browser keeps at most six HTTP/1.1 connections per origin, and each open EventSource holds
// one: with six tabs streaming, a seventh tab's stream (and its API calls) would wait. The
// server sends the same events over a WebSocket (`…/socket`), which that limit does not count,
// so every tab streams live. This class offers the part of EventSource's interface the app
// uses — onopen, onmessage, addEventListener("server_event"), onerror, readyState, close —
// and reconnects by itself, naming the last id seen (`?lastEventId=`) as EventSource sends
// `Last-Event-ID`. A socket that closes before it ever opened is CLOSED for good (a refused
// route, like an HTTP error for EventSource); one that drops after opening reconnects.

const RETRY_MS = 1000;

export class SocketSource {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSED = 2;

  constructor(url) {
    this.url = url;
    this.readyState = SocketSource.CONNECTING;
    this.lastEventId = "";
    this.onopen = null;
    this.onmessage = null;
    this.onerror = null;
    this.listeners = new Map();
    this.timer = null;
    this.connect();
  }

  addEventListener(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, []);
    this.listeners.get(name).push(fn);
  }

  connect() {
    const base = new URL(this.url, location.href);
    base.protocol = base.protocol === "https:" ? "wss:" : "ws:";
    if (this.lastEventId) base.searchParams.set("lastEventId", this.lastEventId);
    const ws = new WebSocket(base.href);
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      if (ws !== this.ws) return;
      opened = true;
      this.readyState = SocketSource.OPEN;
      if (this.onopen) this.onopen({});
    };
    ws.onmessage = (m) => {
      if (ws !== this.ws) return;
      let events;
      try {
        events = JSON.parse(m.data);
      } catch {
        return;
      }
      for (const ev of events) this.dispatch(ev);
    };
    ws.onclose = () => {
      if (ws !== this.ws || this.readyState === SocketSource.CLOSED) return;
      if (!opened) {
        this.readyState = SocketSource.CLOSED;
        if (this.onerror) this.onerror({});
        return;
      }
      this.readyState = SocketSource.CONNECTING;
      if (this.onerror) this.onerror({});
      this.timer = setTimeout(() => this.connect(), RETRY_MS);
    };
  }

  dispatch(ev) {
    if (this.readyState === SocketSource.CLOSED) return;
    this.lastEventId = ev.id;
    const e = { lastEventId: ev.id, data: JSON.stringify(ev.data) };
    if (ev.event) {
      for (const fn of this.listeners.get(ev.event) || []) fn(e);
    } else if (this.onmessage) {
      this.onmessage(e);
    }
  }

  close() {
    this.readyState = SocketSource.CLOSED;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close();
  }
}

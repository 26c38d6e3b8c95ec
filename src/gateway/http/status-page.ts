/**
 * The status page at `/` of the gateway's HTTP listener: one static page, no build step, no
 * framework. One row per server (status, health, tools, attempt, next retry, and why it
 * failed, the current error, or the last failure after a recovery),
 * kept live by the server-sent events of /events (a `server_status` event per change), a
 * retry button per server and one for all. Served as a string so packaging needs nothing.
 */
export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tether gateway</title>
<style>
  :root { color-scheme: light dark; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --muted: #6e7781; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; }
  h1 { font-size: 1.2rem; margin: 0 0 .25rem; }
  #live { color: var(--muted); margin-bottom: 1rem; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid #d0d7de55; vertical-align: top; }
  th { font-weight: 600; }
  td.error { font-family: ui-monospace, monospace; font-size: 12px; max-width: 40rem; word-break: break-word; }
  .status { font-weight: 600; }
  .connected { color: var(--ok); }
  .connecting, .reconnecting, .restarting { color: var(--warn); }
  .failed, .requires_reauth { color: var(--bad); }
  .disconnected, .unknown, .past { color: var(--muted); }
  button { font: inherit; padding: .15rem .6rem; cursor: pointer; }
  .bar { display: flex; gap: 1rem; align-items: center; margin-bottom: .75rem; }
</style>
</head>
<body>
<h1>tether gateway</h1>
<div class="bar"><span id="live">connecting to /events…</span><button id="retry-all" type="button">Retry all</button></div>
<table>
  <thead><tr><th>server</th><th>kind</th><th>status</th><th>health</th><th>tools</th><th>attempt</th><th>next retry</th><th>last error</th><th></th></tr></thead>
  <tbody id="servers"></tbody>
</table>
<script>
'use strict';
const rows = new Map();
const tbody = document.getElementById('servers');
const live = document.getElementById('live');

function cell(row, name) { return row.querySelector('[data-field="' + name + '"]'); }

function render(s) {
  let row = rows.get(s.name);
  if (!row) {
    row = document.createElement('tr');
    row.dataset.server = s.name;
    for (const f of ['name', 'kind', 'status', 'health', 'tools', 'attempt', 'next', 'error']) {
      const td = document.createElement('td');
      td.dataset.field = f;
      if (f === 'error') td.className = 'error';
      row.appendChild(td);
    }
    const td = document.createElement('td');
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = 'Retry';
    button.className = 'retry';
    button.addEventListener('click', () => retry('/mcp/servers/' + encodeURIComponent(s.name) + '/retry', button));
    td.appendChild(button);
    row.appendChild(td);
    tbody.appendChild(row);
    rows.set(s.name, row);
  }
  row.dataset.status = s.status;
  row.dataset.nextRetryAt = s.nextRetryMs === null ? '' : String(Date.now() + s.nextRetryMs);
  cell(row, 'name').textContent = s.name;
  cell(row, 'kind').textContent = s.kind;
  const status = cell(row, 'status');
  status.textContent = s.status;
  status.className = 'status ' + s.status;
  const health = cell(row, 'health');
  // Health is only what the probes of a live connection say: greyed out otherwise.
  const live = s.status === 'connected';
  health.textContent = live ? s.health : '—';
  health.className = !live ? 'unknown' : s.health === 'degraded' ? 'reconnecting' : s.health === 'healthy' ? 'connected' : 'unknown';
  cell(row, 'tools').textContent = String(s.tools.length);
  cell(row, 'attempt').textContent = s.attempt ? String(s.attempt) : '';
  cell(row, 'error').textContent = describeError(s);
  cell(row, 'error').classList.toggle('past', !s.reason && !s.lastError);
  tick();
}

// Why it stopped (failed: "crashed 3 times within 300 s; last: …"), else the current error,
// else the last failure, kept after a recovery.
function describeError(s) {
  if (s.reason) return s.reason;
  if (s.lastError) return s.lastError;
  const f = s.lastFailure;
  if (!f) return '';
  const at = (iso) => new Date(iso).toLocaleTimeString();
  const retried = f.lastAttemptAt && f.lastAttemptAt !== f.at ? ', last retry failed at ' + at(f.lastAttemptAt) : '';
  return 'last failure at ' + at(f.at) + retried + (f.recoveredAt ? ', recovered at ' + at(f.recoveredAt) : '') + ', restarts ' + s.restarts + ': ' + f.error;
}

function tick() {
  for (const row of rows.values()) {
    const at = row.dataset.nextRetryAt;
    cell(row, 'next').textContent = at ? 'in ' + Math.max(0, (Number(at) - Date.now()) / 1000).toFixed(0) + ' s' : '';
  }
}
setInterval(tick, 1000);

function setAll(servers) {
  const names = new Set(servers.map((s) => s.name));
  for (const [name, row] of rows) if (!names.has(name)) { row.remove(); rows.delete(name); }
  for (const s of servers) render(s);
}

async function refresh() {
  const res = await fetch('/mcp/servers', { credentials: 'same-origin' });
  if (res.ok) setAll((await res.json()).servers);
}

async function retry(path, button) {
  button.disabled = true;
  try {
    const res = await fetch(path, { method: 'POST', credentials: 'same-origin' });
    if (!res.ok) live.textContent = 'retry failed: HTTP ' + res.status;
  } finally {
    button.disabled = false;
  }
}
document.getElementById('retry-all').addEventListener('click', (e) => retry('/mcp/servers/retry-all', e.target));

const events = new EventSource('/events');
events.addEventListener('open', () => { live.textContent = 'live'; });
events.addEventListener('error', () => { live.textContent = 'reconnecting to /events…'; });
events.addEventListener('snapshot', (e) => setAll(JSON.parse(e.data).servers));
events.addEventListener('server_status', (e) => render(JSON.parse(e.data)));
events.addEventListener('servers_changed', () => void refresh());
</script>
</body>
</html>
`;

/** Asked for a token: the same origin form posts it to /login once, for a cookie. */
export const LOGIN_PAGE_HTML = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>tether gateway: token</title>
<style>body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; } input { font: inherit; width: 24rem; }</style></head>
<body>
<h1 style="font-size:1.2rem">tether gateway</h1>
<p>This gateway needs its token (the content of <code>--token-file</code>).</p>
<form method="post" action="/login"><input type="password" name="token" autocomplete="current-password" autofocus> <button>Open</button></form>
</body>
</html>
`;

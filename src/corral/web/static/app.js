// Corral's dashboard: one page, views chosen by the URL's #fragment, data from /api/*.
// Every value from the controller is escaped before it reaches the page (job names and
// reasons are users' text).  No library, no build step.
'use strict';

const $ = (sel) => document.querySelector(sel);
const ENTITIES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (v) => String(v ?? '').replace(/[&<>"']/g, (c) => ENTITIES[c]);
let me = null;

async function api(path, opts) {
  const init = Object.assign({ credentials: 'same-origin', headers: {} }, opts || {});
  if (init.method === 'POST' && me) init.headers['X-CSRF-Token'] = me.csrf;
  const r = await fetch(path, init);
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) {
    const e = new Error(body.error || r.statusText);
    e.status = r.status;
    throw e;
  }
  return body;
}

// formatters made once: a 1,000-row table formats 2,000 times
const TIME = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit',
                                                  second: '2-digit' });
const DATE_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: 'short', timeStyle: 'medium' });
function when(t) {
  if (!t) return '';
  const d = new Date(t * 1000);
  const now = new Date();
  const today = d.getFullYear() === now.getFullYear() && d.getMonth() === now.getMonth() &&
    d.getDate() === now.getDate();
  return (today ? TIME : DATE_TIME).format(d);
}

function mins(s) {
  if (s === undefined || s === null || s < 0) return 'UNLIMITED';
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h} h ${m} min` : `${m} min`;
}

const num = (x) => (Number.isFinite(x) ? Math.round(x * 10) / 10 : '?');
const mib = (b) => (Number.isFinite(b) ? `${Math.round(b / 1048576)} MiB` : '?');

function ordinal(n) {
  const s = ['th', 'st', 'nd', 'rd'], v = n % 100;
  return n + (s[(v - 20) % 10] || s[v] || s[0]);
}

// seconds in words: 42 s, 7 min, 3.5 h
function dur(s) {
  if (s === null || s === undefined) return '?';
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// the queue's table (apart: bench/bench_web.py times it in Chromium)
function queueHtml(q) {
  const rows = q.jobs.map((j) => {
    const pending = j.state === 'PENDING';
    const id = j.details ? `<a href="#job/${j.job_id}">${esc(j.id)}</a>` : esc(j.id);
    const place = pending && j.place ? `${ordinal(j.place)} of ${j.in_line}` : '';
    const why = pending ? `<td class="why" data-job="${j.job_id}">${esc(j.why)}` +
      ` <span class="muted">(${esc(j.reason)})</span></td>` : `<td>${esc(j.nodes)}</td>`;
    const start = pending ? (j.estimated_start ? when(j.estimated_start) : 'not known')
      : when(j.start_time);
    return `<tr class="${j.mine ? 'mine' : ''}"><td>${place}</td><td>${id}</td>` +
           `<td>${esc(j.name)}</td><td>${esc(j.user)}</td><td>${esc(j.account)}</td>` +
           `<td>${esc(j.partition)}</td><td>${esc(j.state)}</td><td>${j.gpus}</td>` +
           `${why}<td>${start}</td></tr>`;
  }).join('');
  const all = q.jobs.length < q.pending + q.running ?
    `<span>the first ${q.jobs.length} shown, and yours: <a href="#queue/all">show all</a></span>` : '';
  const e = q.estimates;
  const est = e && e.starts ? `<span class="estimates">estimated starts were off by ` +
    `${dur(e.median_s)} (median), ${dur(e.p90_s)} (p90) over the last ${e.starts} starts</span>` :
    '<span class="estimates">no estimated start checked yet</span>';
  return `<h1>Queue</h1><p class="summary"><span>${q.pending} pending</span>
    <span>${q.running} running</span>${all}${est}</p>
    <table class="queue"><thead><tr><th>Place</th><th>Job</th><th>Name</th><th>User</th>
    <th>Account</th><th>Partition</th><th>State</th><th>GPUs</th>
    <th>Why it waits / nodes</th><th>Start (estimated)</th></tr></thead>
    <tbody>${rows}</tbody></table>`;
}

// ---- views ----------------------------------------------------------------------------
const views = {
  async cluster() {
    const c = await api('/api/cluster');
    const width = Math.max(0, ...c.nodes.map((n) => n.gpus.length));
    const head = Array.from({ length: width }, (_, i) => `<th>GPU ${i}</th>`).join('');
    const rows = c.nodes.map((n) => {
      const cells = [];
      for (let i = 0; i < width; i++) {
        const g = n.gpus[i];
        if (!g) { cells.push('<td class="none"></td>'); continue; }
        const util = g.util === null ? '' : `${Math.round(g.util)}%`;
        if (g.job_id === null && g.held) { // a job this user may not see (PrivateData=jobs)
          cells.push(`<td class="gpu held" data-node="${esc(n.name)}" data-gpu="${i}">` +
                     `<span class="muted">in use</span></td>`);
        } else if (g.job_id === null) {
          cells.push(`<td class="gpu free" data-node="${esc(n.name)}" data-gpu="${i}">` +
                     `<span class="muted">free</span></td>`);
        } else {
          const idle = g.util === 0 ? ' idle' : '';
          cells.push(`<td class="gpu held${idle}" data-node="${esc(n.name)}" data-gpu="${i}" ` +
                     `data-job="${g.job_id}" data-util="${g.util || 0}">` +
                     `<a href="#job/${g.job_id}">${g.job_id}</a> ${esc(g.user)}` +
                     `<br><span class="muted">${util || 'use not sampled'}</span></td>`);
        }
      }
      return `<tr><th><a href="#node/${encodeURIComponent(n.name)}">${esc(n.name)}</a></th>` +
             `<td class="state-${esc(n.state.replace('*', ''))}">${esc(n.state)}` +
             `${n.reason ? `<br><span class="muted">${esc(n.reason)}</span>` : ''}</td>` +
             `<td>${n.alloc_cpus}/${n.cpus}</td>${cells.join('')}</tr>`;
    }).join('');
    return `<h1>Cluster ${esc(c.cluster)}</h1>
      <p class="summary"><span>${c.nodes.length} nodes</span>
      <span>GPUs: ${c.gpus_alloc} of ${c.gpus} allocated</span>
      <span>${c.running} running</span><span>${c.pending} pending</span>
      ${c.sampled ? '<span class="muted">shaded: utilisation; outlined: allocated, idle</span>'
    : '<span class="muted">GPU utilisation: not sampled yet</span>'}</p>
      <table class="grid"><thead><tr><th>Node</th><th>State</th><th>CPUs</th>${head}</tr>
      </thead><tbody>${rows}</tbody></table>`;
  },

  async queue(all) { return queueHtml(await api(all ? '/api/queue?all=1' : '/api/queue')); },

  async idle() {
    const d = await api('/api/idle');
    const free = d.free.map((g) => `<tr><td>${esc(g.node)}</td><td>${g.index}</td>` +
      `<td>${esc(g.gpu_type)}</td></tr>`).join('');
    const idle = d.allocated_idle.map((g) => `<tr><td>${esc(g.node)}</td><td>${g.index}</td>` +
      `<td><a href="#job/${g.job_id}">${g.job_id}</a></td><td>${esc(g.user)}</td>` +
      `<td>${esc(g.account)}</td></tr>`).join('');
    return `<h1>Idle GPUs</h1>
      <h2>Allocated but unused (last sample at 0%, no process)</h2>
      ${d.sampled ? '' : '<p class="muted">No GPU samples from the agents yet.</p>'}
      <table><thead><tr><th>Node</th><th>GPU</th><th>Job</th><th>User</th><th>Account</th>
      </tr></thead><tbody>${idle}</tbody></table>
      <h2>Free for new jobs (${d.free.length})</h2>
      <table><thead><tr><th>Node</th><th>GPU</th><th>Type</th></tr></thead>
      <tbody>${free}</tbody></table>`;
  },

  async users() {
    const d = await api('/api/users');
    const users = d.users.map((u) => `<tr><td>${esc(u.user)}</td><td>${u.running}</td>` +
      `<td>${u.pending}</td><td>${u.cpus}</td><td>${u.gpus}</td></tr>`).join('');
    const assoc = d.associations.map((a) => `<tr><td>${'&nbsp;'.repeat(a.depth * 2)}` +
      `${esc(a.account)}</td><td>${esc(a.user)}</td><td>${a.raw_shares}</td>` +
      `<td>${Math.round(a.raw_usage)}</td><td>${Number(a.fairshare).toFixed(3)}</td>` +
      `<td>${esc(Object.entries(a.limits || {}).map(([k, v]) =>
        `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' '))}</td></tr>`).join('');
    return `<h1>Users and accounts</h1>
      <h2>Now</h2><table><thead><tr><th>User</th><th>Running</th><th>Pending</th>
      <th>CPUs</th><th>GPUs</th></tr></thead><tbody>${users}</tbody></table>
      <h2>Usage, limits and fairshare</h2><table><thead><tr><th>Account</th><th>User</th>
      <th>Shares</th><th>Raw usage</th><th>Fairshare</th><th>Limits</th></tr></thead>
      <tbody>${assoc}</tbody></table>`;
  },

  async job(id) {
    const j = await api(`/api/job/${encodeURIComponent(id)}`);
    const alloc = j.alloc.map((a) => `<tr><td>${esc(a.node)}</td><td>${a.cpus}</td>` +
      `<td>${a.mem_mb} MB</td><td class="gpus">${esc(a.gpus.join(','))}</td>` +
      `<td>${j.gpu_usage[a.node] ? Math.round(j.gpu_usage[a.node].util) + '%' : ''}</td>` +
      `</tr>`).join('');
    const tl = j.timeline.map((e) => `<li>${when(e.time)}: ${esc(e.event)} ` +
      `<span class="muted">${esc(e.state)}</span></li>`).join('');
    // a step's figures per node (controller/usage.py: bytes and seconds)
    const steps = j.steps.map((s) => {
      const nodes = Object.entries(s.usage || {});
      const use = nodes.map(([node, u]) => `${esc(node)}: CPU ${num(u.cpu_user + u.cpu_sys)} s, ` +
        `memory peak ${mib(u.rss_max || u.rss)}, read ${mib(u.read)}, written ${mib(u.write)}` +
        (u.gpuutil_ave !== undefined ? `, GPU ${num(u.gpuutil_ave)}% (max ${num(u.gpuutil_max)}%)`
          : '')).join('<br>');
      return `<tr><td>${esc(s.step)}</td><td>${esc(s.name)}</td><td>${esc(s.state)}</td>` +
             `<td>${use || '<span class="muted">not sampled yet</span>'}</td></tr>`;
    }).join('');
    // `scontrol notify` messages and idle-GPU reclaim's notices (controller/reclaim.py)
    const notes = (j.notices || []).map((t) => `<li>${esc(t)}</li>`).join('');
    const why = j.state === 'PENDING' ? `<dt>Why it waits</dt><dd class="why">${esc(j.why)}` +
      ` (${esc(j.reason)})${j.place ? `; ${ordinal(j.place)} of ${j.in_line} in line` : ''}` +
      `; estimated start ${j.estimated_start ? when(j.estimated_start) : 'not known'}</dd>` : '';
    return `<h1>Job ${esc(j.id)} <span class="muted">${esc(j.name)}</span></h1>
      <dl><dt>State</dt><dd id="job-state">${esc(j.state)}</dd>${why}
      <dt>User</dt><dd>${esc(j.user)} (${esc(j.account)})</dd>
      <dt>Partition</dt><dd>${esc(j.partition)}, QOS ${esc(j.qos)}</dd>
      <dt>Time limit</dt><dd>${mins(j.time_limit)}</dd>
      <dt>Submitted</dt><dd>${when(j.submit_time)}</dd>
      <dt>Exit code</dt><dd>${esc(j.exit_code)}</dd>
      <dt>Working directory</dt><dd>${esc(j.work_dir)}</dd>
      <dt>Output</dt><dd>${esc(j.stdout)}</dd></dl>
      ${notes ? `<h2>Notices</h2><ul class="notices">${notes}</ul>` : ''}
      <h2>Timeline</h2><ul>${tl}</ul>
      <h2>Resources</h2><table><thead><tr><th>Node</th><th>CPUs</th><th>Memory</th>
      <th>GPUs</th><th>GPU use</th></tr></thead><tbody>${alloc}</tbody></table>
      <h2>Steps and usage</h2><table><thead><tr><th>Step</th><th>Name</th><th>State</th>
      <th>Usage</th></tr></thead><tbody>${steps}</tbody></table>
      <h2>Output (end)</h2><pre class="tail">${esc(j.output_tail ?? '(none yet)')}</pre>`;
  },

  async node(name) {
    const n = await api(`/api/node/${encodeURIComponent(name)}`);
    const gpus = n.gpus.map((g) => `<tr><td>${g.index}</td><td>${g.job_id ?? ''}</td>` +
      `<td>${esc(g.user)}</td><td>${g.util === null ? '' : Math.round(g.util) + '%'}</td>` +
      `</tr>`).join('');
    const hist = n.history.map((e) => `<tr><td>${when(e.start)}</td><td>${when(e.end)}</td>` +
      `<td>${esc(e.state)}</td><td>${esc(e.reason)}</td><td>${esc(e.user)}</td></tr>`).join('');
    return `<h1>Node ${esc(n.name)}</h1>
      <dl><dt>State</dt><dd>${esc(n.state_long)}</dd>
      <dt>Reason</dt><dd>${esc(n.reason)} ${esc(n.reason_user)} ${when(n.reason_time)}</dd>
      <dt>CPUs</dt><dd>${n.alloc_cpus} of ${n.cpus} allocated, load ${n.load}</dd>
      <dt>Memory</dt><dd>${n.alloc_memory} of ${n.memory} MB allocated</dd>
      <dt>Partitions</dt><dd>${esc(n.partitions.join(', '))}</dd>
      <dt>Jobs</dt><dd>${n.jobs.map((j) => `<a href="#job/${j}">${j}</a>`).join(' ')}</dd></dl>
      <h2>GPUs</h2><table><thead><tr><th>GPU</th><th>Job</th><th>User</th><th>Use</th></tr>
      </thead><tbody>${gpus}</tbody></table>
      <h2>History (down, drain)</h2><table><thead><tr><th>From</th><th>To</th><th>State</th>
      <th>Reason</th><th>By</th></tr></thead><tbody>${hist}</tbody></table>`;
  },
};

// ---- the page's life --------------------------------------------------------------------
let rendering = false, again = false;

async function render() {
  if (rendering) { again = true; return; }
  rendering = true;
  const [name, arg] = (location.hash.slice(1) || 'cluster').split('/');
  const view = views[name] || views.cluster;
  document.querySelectorAll('nav a').forEach((a) =>
    a.classList.toggle('active', a.getAttribute('href') === `#${name}`));
  try {
    const html = await view(arg && decodeURIComponent(arg));
    $('#main').innerHTML = html;
    $('#main').dataset.view = name;
    // the utilisation bars: set through the CSSOM (the CSP allows no inline style)
    document.querySelectorAll('td.gpu[data-util]').forEach((td) =>
      td.style.setProperty('--util', `${td.dataset.util}%`));
  } catch (e) {
    $('#main').innerHTML = `<p class="error" id="refused">${esc(e.message)}</p>`;
    if (e.status === 401) { $('#live').textContent = ''; }
  } finally {
    rendering = false;
    if (again) { again = false; setTimeout(render, 0); }
  }
}

let soon = null;
function refreshSoon() {
  if (soon === null) soon = setTimeout(() => { soon = null; render(); }, 300);
}

function live() {
  const es = new EventSource('/api/events');
  es.addEventListener('hello', () => { $('#live').textContent = 'live'; });
  es.addEventListener('job', refreshSoon);
  es.addEventListener('node', refreshSoon);
  es.addEventListener('dropped', () => es.close());
  es.onerror = () => { $('#live').textContent = 'reconnecting…'; };
  setInterval(render, 5000); // others' jobs are not in this user's stream
}

async function login() {
  const m = /token=([^&]+)/.exec(location.hash);
  history.replaceState(null, '', '/login'); // the token leaves the address bar at once
  if (!m) {
    $('#main').innerHTML = '<p class="error">No login token: run <code>corral web</code>.</p>';
    return;
  }
  try {
    await api('/login', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                          body: JSON.stringify({ token: decodeURIComponent(m[1]) }) });
    location.replace('/#cluster');
  } catch (e) {
    $('#main').innerHTML = `<p class="error" id="refused">${esc(e.message)}</p>`;
  }
}

async function start() {
  if (location.pathname === '/login') return login();
  try {
    me = await api('/api/me');
  } catch (e) {
    $('#main').innerHTML = `<p class="error" id="refused">${esc(e.message)}</p>`;
    return;
  }
  $('#cluster-name').textContent = me.cluster;
  $('#who').textContent = me.user + (me.operator ? ' (operator)' : '');
  const out = $('#logout');
  out.hidden = false;
  out.addEventListener('click', async () => {
    await api('/logout', { method: 'POST' }).catch(() => null);
    location.replace('/');
  });
  window.addEventListener('hashchange', render);
  await render();
  live();
}

document.addEventListener('DOMContentLoaded', start);

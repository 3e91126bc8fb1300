// The mmcpd page: a client of the daemon's own JSON and SSE API, like any
// other. Text from the model, tools and sessions is only ever put into the
// page as text nodes (el, textContent, renderMarkdown), never parsed as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'mmcpd.token';
  const APPROVAL_KEY = 'mmcpd.approval.'; // + session id: a pending approval's id
  const $ = (id) => document.getElementById(id);

  // ---- building the DOM without HTML ----

  // el makes an element. Strings among children become text nodes.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  // inline turns `code`, **bold** and *em* / _em_ into elements; the rest
  // stays text. No links and no images: a URL is shown, never fetched.
  function inline(text) {
    const out = [];
    const re = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|(?:^|(?<=[\s(]))[*_]([^*_\s][^*_\n]*?)[*_](?=[\s.,;:!?)]|$)/g;
    let last = 0;
    for (const m of text.matchAll(re)) {
      if (m.index > last) out.push(text.slice(last, m.index));
      if (m[1] !== undefined) out.push(el('code', { text: m[1] }));
      else if (m[2] !== undefined) out.push(el('strong', { text: m[2] }));
      else out.push(el('em', { text: m[3] }));
      last = m.index + m[0].length;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  // renderMarkdown reads a small part of Markdown (paragraphs, line breaks,
  // lists, headings, code fences, inline code, bold, emphasis) into
  // elements built one by one, so nothing in the text can become markup.
  function renderMarkdown(text) {
    const frag = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, '\n').split('\n');
    let para = null;
    let list = null;
    const endBlocks = () => { para = null; list = null; };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = line.match(/^\s*```/);
      if (fence) {
        endBlocks();
        const code = [];
        for (i++; i < lines.length && !/^\s*```/.test(lines[i]); i++) code.push(lines[i]);
        frag.append(el('pre', { class: 'code' }, el('code', { text: code.join('\n') })));
        continue;
      }
      if (/^\s*$/.test(line)) { endBlocks(); continue; }
      const heading = line.match(/^\s{0,3}#{1,6}\s+(.*)$/);
      if (heading) {
        endBlocks();
        frag.append(el('p', { class: 'md-heading' }, inline(heading[1])));
        continue;
      }
      const item = line.match(/^\s*(?:([-*+])|(\d{1,3})[.)])\s+(.*)$/);
      if (item) {
        const tag = item[1] ? 'ul' : 'ol';
        if (!list || list.tagName.toLowerCase() !== tag) {
          para = null;
          list = el(tag);
          frag.append(list);
        }
        list.append(el('li', null, inline(item[3])));
        continue;
      }
      if (list && /^\s+\S/.test(line)) { // a list item's continued line
        list.lastElementChild.append(' ', ...inline(line.trim()));
        continue;
      }
      list = null;
      if (!para) {
        para = el('p');
        frag.append(para);
      } else {
        para.append(el('br'));
      }
      para.append(...inline(line));
    }
    return frag;
  }

  function duration(ns) {
    if (!ns) return '';
    const ms = ns / 1e6;
    return ms < 1000 ? `${Math.max(1, Math.round(ms))} ms` : `${(ms / 1000).toFixed(1)} s`;
  }

  function pretty(v) {
    if (v === undefined || v === null) return '';
    if (typeof v === 'string') {
      try { return JSON.stringify(JSON.parse(v), null, 2); } catch { return v; }
    }
    return JSON.stringify(v, null, 2);
  }

  // readable lays out the JSON of a tool's result ("Result of tool:\n{...}"
  // as the model reads it) over lines; other text stays as it is.
  function readable(observation) {
    const m = observation.match(/^(Result of [^\n]*:\n)([[{][\s\S]*)$/);
    if (!m) return observation;
    try { return m[1] + JSON.stringify(JSON.parse(m[2]), null, 2); } catch { return observation; }
  }

  // ---- the API ----

  class APIError extends Error {
    constructor(status, code, message, retryable) {
      super(message);
      this.status = status;
      this.code = code;
      this.retryable = retryable;
    }
  }

  async function errorOf(resp) {
    let body = null;
    try { body = await resp.json(); } catch { /* not JSON */ }
    const e = (body && body.error) || {};
    return new APIError(resp.status, e.code || `http_${resp.status}`, e.message || resp.statusText || 'request failed', !!e.retryable);
  }

  // The token: asked once, when a call is refused for the lack of it, and
  // kept in localStorage. Calls refused meanwhile wait for the same answer.
  let tokenAsked = null;

  function askToken(refused) {
    if (tokenAsked) return tokenAsked;
    tokenAsked = new Promise((resolve) => {
      const dialog = $('token-dialog');
      const input = $('token');
      const error = $('token-error');
      error.hidden = !refused;
      error.textContent = refused ? 'That token was refused; check MMCP_API_TOKEN.' : '';
      input.value = '';
      const form = $('token-form');
      const done = (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) { input.focus(); return; }
        localStorage.setItem(TOKEN_KEY, t);
        form.removeEventListener('submit', done);
        dialog.close();
        tokenAsked = null;
        resolve();
      };
      form.addEventListener('submit', done);
      if (!dialog.open) dialog.showModal();
      input.focus();
    });
    return tokenAsked;
  }
  // The dialog stays until a token is given: without it nothing works.
  $('token-dialog').addEventListener('cancel', (ev) => ev.preventDefault());

  // call sends one request with the token, JSON in and the Accept asked
  // for; it asks for the token and tries again as long as the daemon
  // answers 401.
  async function call(method, path, body, accept) {
    for (;;) {
      const headers = { Accept: accept || 'application/json' };
      const token = localStorage.getItem(TOKEN_KEY);
      if (token) headers.Authorization = `Bearer ${token}`;
      const init = { method, headers, cache: 'no-store' };
      if (body !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(body);
      }
      const resp = await fetch(path, init);
      if (resp.status === 401) {
        await askToken(!!token);
        continue;
      }
      return resp;
    }
  }

  async function getJSON(path) {
    const resp = await call('GET', path);
    if (!resp.ok) throw await errorOf(resp);
    return resp.json();
  }

  async function send(method, path, body) {
    const resp = await call(method, path, body);
    if (!resp.ok) throw await errorOf(resp);
    return resp.status === 204 ? null : resp.json();
  }

  // stream posts body to path and hands each Server-Sent Event to onEvent
  // as (type, data). Comment lines (heartbeats) are skipped.
  async function stream(path, body, onEvent) {
    const resp = await call('POST', path, body, 'text/event-stream');
    if (!resp.ok) throw await errorOf(resp);
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let type = 'message';
        let data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith(':')) continue;
          if (line.startsWith('event:')) type = line.slice(6).trim();
          else if (line.startsWith('data:')) data += line.slice(5).replace(/^ /, '');
        }
        if (data) onEvent(type, JSON.parse(data));
      }
    }
  }

  // ---- the conversation ----

  const messages = $('messages');
  const state = {
    session: null, // the open session's id
    busy: false, // a turn is running
    turn: null, // the TurnView of the running turn
  };

  function nearBottom() {
    return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 80;
  }

  function follow(fn) {
    const stick = nearBottom();
    fn();
    if (stick) messages.scrollTop = messages.scrollHeight;
  }

  // StepView is one step: a collapsible block that fills in as its events
  // come (thought, action, arguments, result or error, durations).
  class StepView {
    constructor(n, parent) {
      this.n = n;
      this.attempt = 0;
      this.thoughtText = '';
      this.label = el('span', { class: 'step-action', text: 'thinking…' });
      this.stateText = el('span', { class: 'step-state' });
      this.time = el('span', { class: 'step-time' });
      this.summary = el('summary', null, el('span', { class: 'step-n', text: `Step ${n}` }), ' ', this.label, ' ', this.stateText, ' ', this.time);
      this.thought = el('div', { class: 'thought', hidden: true });
      this.args = el('pre', { class: 'args', hidden: true });
      this.result = el('pre', { class: 'result', hidden: true });
      this.notes = el('div', { class: 'notes' });
      this.root = el('details', { class: 'step', 'data-step': n, 'data-state': 'thinking' },
        this.summary,
        el('div', { class: 'step-body' },
          el('div', { class: 'field-label', text: 'Thought' }), this.thought,
          el('div', { class: 'field-label args-label', hidden: true, text: 'Arguments' }), this.args,
          el('div', { class: 'field-label result-label', hidden: true, text: 'Result' }), this.result,
          this.notes));
      this.root.open = true; // while it runs; collapse closes it after
      this.modelNs = 0;
      this.toolNs = 0;
      parent.append(this.root);
    }

    setState(s, text) {
      this.root.dataset.state = s;
      this.stateText.textContent = text || '';
    }

    showThought(text, attempt) {
      if (attempt !== undefined && attempt !== this.attempt) {
        this.attempt = attempt;
        this.thoughtText = '';
      }
      this.thoughtText += text;
      this.thought.textContent = this.thoughtText;
      this.thought.hidden = this.thoughtText === '';
      this.thought.previousSibling.hidden = this.thought.hidden;
    }

    setThought(text) {
      this.thoughtText = '';
      this.showThought(text || '');
    }

    retract(attempt) {
      if (attempt === this.attempt) this.setThought('');
    }

    setAction(action, args) {
      this.root.dataset.action = action;
      this.label.textContent = action === 'final_response' ? 'answer' : action;
      if (action !== 'final_response' && args !== undefined) {
        this.args.textContent = pretty(args);
        this.args.hidden = false;
        this.root.querySelector('.args-label').hidden = false;
      }
    }

    setResult(text, failed) {
      this.result.textContent = text;
      this.result.hidden = false;
      this.result.classList.toggle('error', !!failed);
      const label = this.root.querySelector('.result-label');
      label.hidden = false;
      label.textContent = failed ? 'Error' : 'Result';
    }

    note(text, cls) {
      this.notes.append(el('p', { class: cls || 'note', text }));
    }

    times() {
      const parts = [];
      if (this.modelNs) parts.push(`model ${duration(this.modelNs)}`);
      if (this.toolNs) parts.push(`tool ${duration(this.toolNs)}`);
      this.time.textContent = parts.length ? `(${parts.join(', ')})` : '';
    }
  }

  // TurnView is one turn: the question, its steps, an approval if one is
  // asked, and the answer, which grows as the model writes it.
  class TurnView {
    constructor(question) {
      this.root = el('section', { class: 'turn' });
      this.root.append(el('div', { class: 'bubble user' }, el('div', { class: 'who', text: 'You' }), el('div', { class: 'text', text: question })));
      this.steps = new Map();
      this.stepsBox = el('div', { class: 'steps' });
      this.root.append(this.stepsBox);
      this.answerText = '';
      this.answerBody = el('div', { class: 'text' });
      this.answer = el('div', { class: 'bubble answer', hidden: true }, el('div', { class: 'who', text: 'mmcpd' }), this.answerBody);
      this.root.append(this.answer);
      $('welcome').hidden = true;
      messages.append(this.root);
    }

    // step finds or makes the view of step n. A resumed turn numbers its
    // steps again from 1, the approved call being step 1: that is the
    // waiting step, and the next ones follow its number.
    step(n) {
      const key = this.resumed ? `r${n}` : n;
      let s = this.steps.get(key);
      if (!s && this.resumed && n === 1) s = this.resumed;
      if (!s) {
        s = new StepView(this.resumed ? this.resumed.n + n - 1 : n, this.stepsBox);
      }
      this.steps.set(key, s);
      return s;
    }

    // resume goes on after an answered approval: the waiting step gets the
    // call's result, later steps come after the approval card.
    resume(decision) {
      this.resumed = this.waiting || null;
      if (this.resumed) this.resumed.setState(decision === 'approve' ? 'running' : 'failed', decision === 'approve' ? 'approved, running…' : 'denied');
      this.stepsBox = el('div', { class: 'steps' });
      this.root.insertBefore(this.stepsBox, this.answer);
    }

    renderAnswer() {
      this.answerBody.replaceChildren(renderMarkdown(this.answerText));
      this.answer.hidden = this.answerText === '';
    }

    setAnswer(text) {
      this.answerText = text || '';
      this.renderAnswer();
    }

    notice(text, cls) {
      const p = el('p', { class: `notice ${cls || ''}`, text });
      this.root.insertBefore(p, this.answer);
      return p;
    }

    error(message, code) {
      this.answer.classList.remove('streaming');
      const p = this.notice(code ? `${message} (${code})` : message, 'error');
      p.setAttribute('role', 'alert');
    }

    // collapse closes the steps the user left alone, once the turn is over.
    collapse() {
      for (const s of this.root.querySelectorAll('details.step')) {
        if (s.dataset.touched !== 'yes') s.open = false;
      }
    }

    // handle shows one event of the stream.
    handle(type, ev) {
      follow(() => this.show(type, ev));
    }

    show(type, ev) {
      switch (type) {
        case 'start':
          openedSession(ev.session_id);
          break;
        case 'step_start':
          this.step(ev.step).setState('thinking', 'thinking…');
          break;
        case 'thought_delta':
          this.step(ev.step).showThought(ev.text || '', ev.attempt);
          break;
        case 'answer_delta':
          if (ev.attempt !== this.answerAttempt) {
            this.answerAttempt = ev.attempt;
            this.answerText = '';
          }
          this.answerText += ev.text || '';
          this.answer.classList.add('streaming');
          this.renderAnswer();
          break;
        case 'answer_retracted':
          this.step(ev.step).retract(ev.attempt);
          if (ev.attempt === this.answerAttempt) this.setAnswer('');
          break;
        case 'model_reply': {
          const s = this.step(ev.step);
          s.modelNs += ev.duration_ns || 0;
          if (ev.action) {
            s.setThought(ev.thought);
            s.setAction(ev.action, ev.args);
            if (ev.action === 'final_response') s.setState('done', '');
          }
          s.times();
          break;
        }
        case 'validation_error':
          this.step(ev.step).note(`The model's reply was not valid; asking again: ${(ev.problems || []).join('; ')}`, 'warn');
          break;
        case 'tool_start': {
          const s = this.step(ev.step);
          s.setAction(ev.action, ev.args);
          s.setState('running', 'running…');
          break;
        }
        case 'tool_end': {
          const s = this.step(ev.step);
          s.toolNs = ev.duration_ns || 0;
          if (ev.error) {
            s.setResult(ev.error, true);
            s.setState('failed', 'failed');
          } else {
            s.setResult(readable(ev.observation || ''), false);
            s.setState('done', 'done');
          }
          s.times();
          break;
        }
        case 'final':
          this.answer.classList.remove('streaming');
          this.setAnswer(ev.answer);
          break;
        case 'context_overflow':
          this.notice(`The conversation no longer fits the model's context (system ${ev.system_chars} + turn ${ev.turn_chars} characters, budget ${ev.budget_chars}).`, 'warn');
          break;
        case 'action_request': {
          const s = this.step(ev.step);
          s.setAction(ev.action, ev.args);
          s.setState('waiting', 'waits for your answer');
          this.waiting = s;
          this.approval({ session: ev.session_id, id: ev.approval_id, tool: ev.action, args: ev.args, explanation: ev.explanation || ev.thought });
          break;
        }
        case 'done':
          this.answer.classList.remove('streaming');
          if (ev.type === 'answer') this.setAnswer(ev.answer);
          else if (ev.type === 'action_request' && !this.card) {
            this.approval({ session: ev.session_id, id: ev.approval_id, tool: ev.tool, args: ev.args, explanation: ev.explanation });
          }
          if (ev.forced) this.notice('The step limit was reached: this is the best answer the model could give then.', 'warn');
          break;
        case 'error': {
          const e = ev.error || {};
          this.error(e.message || 'the turn failed', e.code);
          break;
        }
        default:
          break;
      }
    }

    // approval shows an action request: exactly what would run, and the
    // buttons that answer it.
    approval(req) {
      if (req.session && req.id) localStorage.setItem(APPROVAL_KEY + req.session, req.id);
      const approve = el('button', { class: 'approve', type: 'button', text: 'Approve' });
      const deny = el('button', { class: 'deny danger', type: 'button', text: 'Deny' });
      const status = el('p', { class: 'approval-status', role: 'status' });
      const card = el('div', { class: 'approval', 'data-approval': req.id || '', 'data-tool': req.tool },
        el('p', { class: 'approval-title' }, 'The agent asks to run ', el('code', { text: req.tool })),
        el('div', { class: 'field-label', text: 'With these arguments' }),
        el('pre', { class: 'args', text: pretty(req.args) }),
        req.explanation ? el('p', { class: 'explanation' }, el('span', { class: 'field-label', text: 'Because: ' }), req.explanation) : null,
        req.id ? el('div', { class: 'row' }, approve, deny) : el('p', { class: 'muted', text: 'Open the link of this request to answer it.' }),
        status);
      this.card = card;
      this.root.insertBefore(card, this.answer);
      const answer = async (decision) => {
        if (state.busy) return;
        approve.disabled = true;
        deny.disabled = true;
        status.textContent = decision === 'approve' ? 'Approved: running it…' : 'Denied: nothing runs.';
        card.dataset.decision = decision;
        try {
          this.resume(decision);
          await runTurn(this, '/v1/chat/respond', { session_id: req.session, approval_id: req.id, decision });
          localStorage.removeItem(APPROVAL_KEY + req.session);
          approve.remove();
          deny.remove();
          if (/\/approval\/|[#&]approval=/.test(location.hash)) history.replaceState(null, '', `#/session/${encodeURIComponent(req.session)}`);
        } catch (e) {
          status.textContent = e.message;
          if (this.waiting) this.waiting.setState('waiting', e.code || 'not answered');
          if (e.status === 409 || e.status === 404) {
            localStorage.removeItem(APPROVAL_KEY + req.session);
            approve.remove();
            deny.remove();
          } else {
            approve.disabled = false;
            deny.disabled = false;
          }
        }
      };
      approve.addEventListener('click', () => answer('approve'));
      deny.addEventListener('click', () => answer('deny'));
    }
  }

  // Steps opened or closed by the user stay as they are when the turn ends.
  messages.addEventListener('click', (ev) => {
    const summary = ev.target.closest('summary');
    if (summary && summary.parentElement.classList.contains('step')) summary.parentElement.dataset.touched = 'yes';
  });

  function setBusy(busy) {
    state.busy = busy;
    $('send').disabled = busy;
    $('message').readOnly = busy;
    document.body.classList.toggle('busy', busy);
  }

  // runTurn streams a turn (a message, or the answer to an approval) into
  // view. It throws the API's error when the daemon refused the request
  // before the turn started.
  async function runTurn(view, path, body) {
    setBusy(true);
    state.turn = view;
    try {
      await stream(path, body, (type, ev) => view.handle(type, ev));
    } catch (e) {
      if (!(e instanceof APIError) || path.endsWith('/respond')) {
        if (!(e instanceof APIError)) view.error(`The connection to mmcpd broke: ${e.message}`);
        throw e;
      }
      view.error(e.message, e.code);
    } finally {
      view.collapse();
      state.turn = null;
      setBusy(false);
      refreshSessions();
    }
  }

  async function sendMessage(text) {
    const view = new TurnView(text);
    messages.scrollTop = messages.scrollHeight;
    const body = { message: text };
    if (state.session) body.session_id = state.session;
    try {
      await runTurn(view, '/v1/chat', body);
    } catch { /* shown in the turn */ }
  }

  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const box = $('message');
    const text = box.value.trim();
    if (!text || state.busy) return;
    box.value = '';
    sendMessage(text);
  });
  $('message').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });

  // ---- sessions ----

  function clearConversation() {
    for (const t of messages.querySelectorAll('.turn, .notice')) t.remove();
    $('welcome').hidden = false;
  }

  // openedSession records the session a new turn started, so that the
  // next message continues it and a reload finds it.
  function openedSession(id) {
    if (!id || state.session === id) return;
    state.session = id;
    history.replaceState(null, '', `#/session/${encodeURIComponent(id)}`);
    markCurrent();
  }

  function newChat() {
    if (state.busy) return;
    state.session = null;
    history.replaceState(null, '', '#/');
    clearConversation();
    markCurrent();
    closeDrawers();
    $('message').focus();
  }

  // showSession renders a stored session: each turn's question, its tool
  // steps with their results, and its answer or how it ended.
  async function showSession(id, approvalID) {
    let view;
    try {
      view = await getJSON(`/v1/sessions/${encodeURIComponent(id)}`);
    } catch (e) {
      clearConversation();
      state.session = null;
      const p = el('p', { class: 'notice error', role: 'alert', text: e.message });
      messages.append(p);
      return;
    }
    clearConversation();
    state.session = view.id;
    markCurrent();
    const pending = approvalID || localStorage.getItem(APPROVAL_KEY + view.id);
    view.turns.forEach((turn, ti) => {
      const items = turn.items || [];
      const question = items.length && items[0].type === 'user' ? items[0].content : '';
      const tv = new TurnView(question);
      let n = 0;
      let last = null;
      for (const it of items.slice(1)) {
        if (it.type === 'tool_call') {
          last = tv.step(++n);
          last.setThought(it.thought);
          last.setAction(it.tool, it.args);
          last.setState('called', '');
        } else if (it.type === 'tool_result') {
          if (!last) last = tv.step(++n);
          const failed = /^\S+ (failed|was not run|did not finish|crashed)/.test(it.content || '');
          last.setResult(failed ? it.content || '' : readable(it.content || ''), failed);
          last.setState(failed ? 'failed' : 'done', failed ? 'failed' : 'done');
        } else if (it.type === 'assistant') {
          tv.setAnswer(it.content);
        }
      }
      tv.collapse();
      if (turn.status === 'awaiting_approval' && last) {
        last.setState('waiting', 'waits for your answer');
        tv.waiting = last;
        const isLast = ti === view.turns.length - 1;
        tv.approval({ session: view.id, id: isLast ? pending : null, tool: last.root.dataset.action, args: JSON.parse(last.args.textContent || 'null'), explanation: last.thoughtText });
      } else if (turn.status === 'failed') {
        tv.error(turn.error || 'this turn failed');
      } else if (turn.status === 'cancelled' || turn.status === 'interrupted' || turn.status === 'running') {
        tv.notice(`This turn was ${turn.status === 'running' ? 'still running' : turn.status}.`, 'warn');
      }
    });
    if (!view.turns.some((t) => t.status === 'awaiting_approval')) localStorage.removeItem(APPROVAL_KEY + view.id);
    messages.scrollTop = messages.scrollHeight;
  }

  let sessionsCursor = '';

  function markCurrent() {
    for (const li of $('sessions').children) {
      const current = li.dataset.id === state.session;
      li.classList.toggle('current', current);
      const open = li.querySelector('.open');
      if (open) {
        if (current) open.setAttribute('aria-current', 'page');
        else open.removeAttribute('aria-current');
      }
    }
  }

  function when(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return '';
    const today = new Date();
    return d.toDateString() === today.toDateString()
      ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
      : d.toLocaleDateString([], { month: 'short', day: 'numeric' });
  }

  function sessionItem(s) {
    const li = el('li', { 'data-id': s.id });
    const fill = () => {
      const open = el('button', { class: 'open', type: 'button', title: s.title },
        el('span', { class: 'title', text: s.title }), el('span', { class: 'when', text: when(s.updated) }));
      open.addEventListener('click', () => { closeDrawers(); go(`#/session/${encodeURIComponent(s.id)}`); });
      const rename = el('button', { class: 'ghost small rename', type: 'button', 'aria-label': `Rename ${s.title}`, text: 'Rename' });
      rename.addEventListener('click', () => renaming());
      const del = el('button', { class: 'ghost small delete', type: 'button', 'aria-label': `Delete ${s.title}`, text: 'Delete' });
      let armed = null;
      del.addEventListener('click', async () => {
        if (!armed) { // a second press within 4 s deletes
          del.textContent = 'Delete?';
          del.classList.add('danger');
          armed = setTimeout(() => { armed = null; del.textContent = 'Delete'; del.classList.remove('danger'); }, 4000);
          return;
        }
        clearTimeout(armed);
        try {
          await send('DELETE', `/v1/sessions/${encodeURIComponent(s.id)}`);
          localStorage.removeItem(APPROVAL_KEY + s.id);
          li.remove();
          if (state.session === s.id) newChat();
          $('sessions-empty').hidden = $('sessions').children.length > 0;
        } catch (e) {
          del.textContent = 'Delete';
          del.classList.remove('danger');
          armed = null;
          li.append(el('p', { class: 'error small', role: 'alert', text: e.message }));
        }
      });
      li.replaceChildren(open, el('span', { class: 'actions' }, rename, del));
    };
    const renaming = () => {
      const input = el('input', { class: 'rename-input', type: 'text', maxlength: 200, 'aria-label': 'New title' });
      input.value = s.title;
      const error = el('p', { class: 'error small', role: 'alert', hidden: true });
      const form = el('form', { class: 'rename-form' }, input,
        el('button', { type: 'submit', class: 'small', text: 'Save' }),
        el('button', { type: 'button', class: 'ghost small', text: 'Cancel', onclick: () => fill() }), error);
      input.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') { ev.preventDefault(); fill(); li.querySelector('.rename').focus(); } });
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        const title = input.value.trim();
        if (!title) return;
        try {
          const updated = await send('PATCH', `/v1/sessions/${encodeURIComponent(s.id)}`, { title });
          s.title = updated.title;
          fill();
          li.querySelector('.rename').focus();
        } catch (e) {
          error.textContent = e.message;
          error.hidden = false;
        }
      });
      li.replaceChildren(form);
      input.focus();
      input.select();
    };
    fill();
    return li;
  }

  async function loadSessions(more) {
    const q = more && sessionsCursor ? `&cursor=${encodeURIComponent(sessionsCursor)}` : '';
    let page;
    try {
      page = await getJSON(`/v1/sessions?limit=50${q}`);
    } catch (e) {
      $('sessions-empty').hidden = false;
      $('sessions-empty').textContent = `Sessions could not be listed: ${e.message}`;
      return;
    }
    const list = $('sessions');
    if (!more) list.replaceChildren();
    for (const s of page.sessions) list.append(sessionItem(s));
    sessionsCursor = page.next_cursor || '';
    $('more-sessions').hidden = !sessionsCursor;
    $('sessions-empty').textContent = 'No sessions yet: ask something.';
    $('sessions-empty').hidden = list.children.length > 0;
    markCurrent();
  }

  // refreshSessions reloads the list unless the user is renaming one.
  function refreshSessions() {
    if (!$('sessions').querySelector('.rename-form')) loadSessions(false);
  }

  $('more-sessions').addEventListener('click', () => loadSessions(true));
  $('new-chat').addEventListener('click', newChat);

  // ---- status: the model, the plugins and their tools ----

  const statusWords = {
    ready: 'ready', standby: 'standby', unreachable: 'unreachable', failed: 'failed', starting: 'starting', restarting: 'restarting',
  };

  async function loadStatus() {
    const model = $('model-status');
    const badge = $('model-state');
    let ready;
    let statusAgain = false;
    const resp = await call('GET', '/readyz');
    // With several model servers /readyz lists each (backends), ready or not.
    const backends = (body) => (body && Array.isArray(body.backends) && body.backends.length
      ? el('ul', { class: 'backends' }, body.backends.map((b) => el('li', null,
        el('span', { class: 'status-tag', 'data-status': b.state === 'ready' || b.state === 'up' ? 'ready' : 'unreachable', text: b.state }), ' ',
        el('strong', { text: b.name }), ' ', b.model || '', b.reason ? el('div', { class: 'reason small', text: b.reason }) : null)))
      : null);
    if (resp.ok) {
      ready = await resp.json();
      const name = ready.model ? `Model ${ready.model}` : 'Model';
      badge.textContent = 'ready';
      badge.dataset.state = 'ready';
      badge.title = `${name}: ready`;
      model.replaceChildren(el('h3', { text: 'Model' }),
        el('p', null, el('span', { class: 'status-tag', 'data-status': 'ready', text: 'ready' }), ' ', ready.model || 'the model answers'),
        backends(ready));
    } else {
      const body = await resp.clone().json().catch(() => null);
      const e = await errorOf(resp);
      statusAgain = e.code === 'plugins_starting';
      const word = { model_unavailable: 'model unreachable', model_missing: 'model missing', plugins_starting: 'starting', storage_lost: 'storage lost' }[e.code] || 'not ready';
      badge.textContent = word;
      badge.dataset.state = statusAgain ? 'starting' : 'down';
      badge.title = e.message;
      model.replaceChildren(el('h3', { text: 'Model' }),
        el('p', null, el('span', { class: 'status-tag', 'data-status': statusAgain ? 'starting' : 'unreachable', text: word }), ' '),
        el('p', { class: 'reason', text: e.message }),
        backends(body));
    }

    try {
      const [{ plugins }, { tools }] = await Promise.all([getJSON('/v1/plugins'), getJSON('/v1/tools')]);
      const usable = tools.filter((t) => !t.disabled).length;
      $('tools-summary').replaceChildren(el('h3', { text: 'Tools' }),
        el('p', { text: `${usable} of ${tools.length} tools usable now.` }));
      const box = $('plugins-status');
      box.replaceChildren(el('h3', { text: 'Plugins' }));
      if (!plugins.length) box.append(el('p', { class: 'muted', text: 'No plugins: the model has no tools.' }));
      for (const p of plugins) {
        // Required settings not set, unless the reason already names them.
        const missing = (p.settings || []).filter((s) => s.required && !s.set && !(p.reason || '').includes(s.variable)).map((s) => s.variable);
        const card = el('div', { class: 'plugin', 'data-plugin': p.name, 'data-status': p.status },
          el('div', { class: 'plugin-head' },
            el('strong', { text: p.name }), ' ', el('span', { class: 'muted', text: p.version || '' }), ' ',
            el('span', { class: 'status-tag', 'data-status': p.status, text: statusWords[p.status] || p.status })),
          p.reason ? el('p', { class: 'reason', text: p.reason }) : null,
          missing.length ? el('p', { class: 'missing' }, 'Missing: ', missing.map((v, i) => [i ? ', ' : '', el('code', { text: v })])) : null);
        const list = el('ul', { class: 'tools' });
        for (const t of p.tools || []) {
          list.append(el('li', { 'data-tool': t.name },
            el('code', { text: t.name }),
            t.needs_approval ? el('span', { class: 'tag', text: 'asks first' }) : null,
            t.breaker && t.breaker !== 'closed' ? el('span', { class: 'tag bad', text: t.breaker === 'open' ? 'breaker open' : `breaker ${t.breaker}` }) : null,
            // A tool of a plugin that is not ready has the plugin's reason.
            t.disabled && p.status === 'ready' ? el('div', { class: 'reason small', text: t.disabled }) : null));
        }
        card.append(list);
        box.append(card);
      }
    } catch (e) {
      $('plugins-status').replaceChildren(el('p', { class: 'error', text: `Plugins could not be listed: ${e.message}` }));
    }
    if (statusAgain) setTimeout(loadStatus, 2000);
  }

  function toggleStatus(show) {
    const panel = $('status');
    const open = show === undefined ? panel.hidden : show;
    panel.hidden = !open;
    $('status-btn').setAttribute('aria-expanded', String(open));
    if (open) {
      loadStatus();
      $('status-close').focus();
    }
  }

  $('status-btn').addEventListener('click', () => toggleStatus());
  $('model-state').addEventListener('click', () => toggleStatus(true));
  $('status-close').addEventListener('click', () => { toggleStatus(false); $('status-btn').focus(); });
  $('status-refresh').addEventListener('click', () => loadStatus());

  // ---- narrow screens: the sessions list is a drawer ----

  function closeDrawers() {
    document.body.classList.remove('drawer');
    $('menu').setAttribute('aria-expanded', 'false');
  }

  $('menu').addEventListener('click', () => {
    const open = !document.body.classList.contains('drawer');
    document.body.classList.toggle('drawer', open);
    $('menu').setAttribute('aria-expanded', String(open));
    if (open) {
      const first = $('sessions').querySelector('button');
      if (first) first.focus();
    }
  });

  $('sidebar-close').addEventListener('click', () => { closeDrawers(); $('menu').focus(); });
  // A tap beside the open drawer closes it.
  document.addEventListener('click', (ev) => {
    if (document.body.classList.contains('drawer') && !ev.target.closest('#sidebar, #menu')) closeDrawers();
  });

  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Escape' || $('token-dialog').open) return;
    if (document.body.classList.contains('drawer')) { closeDrawers(); $('menu').focus(); }
    else if (!$('status').hidden) { toggleStatus(false); $('status-btn').focus(); }
  });

  // ---- routes: #/session/<id>[/approval/<id>] ----

  function go(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  function route() {
    if (state.busy) return;
    // #/session/<id>[/approval/<id>], or #session=<id>&approval=<id> as the
    // OpenAI route's approval questions link it.
    let m = location.hash.match(/^#\/session\/([^/]+)(?:\/approval\/([^/]+))?$/);
    if (!m && /^#session=/.test(location.hash)) {
      const q = new URLSearchParams(location.hash.slice(1));
      m = [null, encodeURIComponent(q.get('session') || ''), q.get('approval') ? encodeURIComponent(q.get('approval')) : undefined];
    }
    if (m && m[1]) {
      showSession(decodeURIComponent(m[1]), m[2] ? decodeURIComponent(m[2]) : null);
      return;
    }
    state.session = null;
    clearConversation();
    markCurrent();
  }

  window.addEventListener('hashchange', route);

  async function start() {
    await loadStatus().catch(() => {});
    await loadSessions(false);
    route();
    $('message').focus();
  }

  start();
})();

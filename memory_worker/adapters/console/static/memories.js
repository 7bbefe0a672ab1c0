// The memories panel: newest first with paging, search through memory::recall (scores and the
// retrieval mode that ran), tag chips, the history toggle, and per memory: pin, edit, supersede
// (by another memory, `supersede.js`), delete and its full revision history (memory::history).
// Every mutation carries the revision it was made against (`expected_revision`); a refusal says so
// instead of overwriting.

import { h, keepFocus, reconcile, setAgo, setText } from './dom.js'
import { absoluteTime, isoTime, plural, score as formatScore, splitList } from './format.js'
import { openSupersede } from './supersede.js'

const PAGE = 50
const SEARCH_LIMIT = 50
const SEARCH_DEBOUNCE_MS = 300
// The API's own words: `semantic-unavailable` is an empty result, not "no matches".
const UNEMBEDDED = 'Semantic search is unavailable: this worker has no embedder (embeddings off, or none reachable), so nothing was compared by meaning. Pick hybrid or lexical to search by words.'
const CONFIDENCE = {
  stated: ['saved explicitly', 'Saved by an agent or a person with memory::save (highest trust)'],
  extracted: ['from chat', 'Stated directly in a conversation and captured by extraction'],
  inferred: ['inferred', 'Derived by the extraction model rather than stated verbatim'],
}

export function createMemoriesPanel(ctx) {
  const state = { bank: null, query: '', mode: 'hybrid', tag: null, history: false, offset: 0 }
  const rows = new Map() // id → row controller

  // --- toolbar ---------------------------------------------------------------------------------
  // No `maxLength`: it counts UTF-16 units (two per emoji) where the worker counts 2,000 code
  // points; it cut a pasted memory short and blocked editing a valid one. The worker's refusal
  // says the limit instead.
  const saveText = h('textarea', {
    class: 'mw-input mw-save-text', dir: 'auto', rows: 2, placeholder: 'Remember something… (one self-contained sentence)',
    attrs: { 'aria-label': 'New memory text' },
    // Not while an input method composes: its Enter confirms a candidate (Japanese, Chinese).
    on: {
      keydown: (e) => { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); saveForm.requestSubmit() } },
      input: () => ctx.changed(), // a memory typed and not saved is asked about before leaving
    },
  })
  const saveTags = h('input', { class: 'mw-input', placeholder: 'tags, comma separated', attrs: { 'aria-label': 'New memory tags', autocomplete: 'off' } })
  const savePinned = h('input', { type: 'checkbox', attrs: { 'aria-label': 'Pin the new memory' } })
  const saveForm = h('form', { class: 'mw-save', on: { submit: onSave } },
    saveText,
    h('div', { class: 'mw-save-row' },
      saveTags,
      h('label', { class: 'mw-check' }, savePinned, h('span', { text: 'pinned' })),
      h('button', { type: 'submit', class: 'mw-btn mw-primary', text: 'Save memory' })))

  const searchInput = h('input', {
    type: 'search', class: 'mw-input mw-search', placeholder: 'Search memories (press / from anywhere)',
    attrs: { 'aria-label': 'Search memories', autocomplete: 'off' },
    on: { input: onSearchInput, keydown: (e) => { if (e.key === 'Enter' && !e.isComposing) { e.preventDefault(); runSearch() } } },
  })
  const modeSelect = h('select', { class: 'mw-input mw-mode', attrs: { 'aria-label': 'Retrieval mode' }, on: { change: () => { state.mode = modeSelect.value; if (state.query) refresh() } } },
    h('option', { value: 'hybrid', text: 'hybrid (what the hook uses)' }),
    h('option', { value: 'lexical', text: 'lexical (BM25 only)' }),
    h('option', { value: 'semantic', text: 'semantic (cosine only)' }))
  const historyToggle = h('input', { type: 'checkbox', on: { change: () => { state.history = historyToggle.checked; state.offset = 0; refresh() } } })
  const chips = h('div', { class: 'mw-chips', attrs: { role: 'group', 'aria-label': 'Filter by tag' } })
  const summaryText = h('span')
  const summary = h('p', { class: 'mw-summary', attrs: { 'aria-live': 'polite' } }, summaryText)
  const list = h('ol', { class: 'mw-memory-list', attrs: { 'aria-label': 'Memories' } })
  const empty = h('p', { class: 'mw-empty', hidden: true })
  const prev = h('button', { type: 'button', class: 'mw-btn', text: '← Newer', on: { click: () => page(-1) } })
  const next = h('button', { type: 'button', class: 'mw-btn', text: 'Older →', on: { click: () => page(1) } })
  const pageText = h('span', { class: 'mw-muted mw-page-text' })
  const pager = h('nav', { class: 'mw-pager', attrs: { 'aria-label': 'Pages' } }, prev, pageText, next)

  const el = h('div', { class: 'mw-memories' },
    saveForm,
    h('div', { class: 'mw-search-row' }, searchInput, modeSelect,
      h('label', { class: 'mw-check', title: 'Also show superseded and deleted records' }, historyToggle, h('span', { text: 'show history' }))),
    chips, summary, list, empty, pager)

  // --- data ------------------------------------------------------------------------------------
  let inFlight = null
  let again = false
  let unembedded = false // the last search was semantic and compared nothing (no embedder)
  let liveOnly = true // every refresh asked since the last one ran came from a live event
  async function refresh({ live = false } = {}) {
    if (!state.bank) return
    if (!live) liveOnly = false
    if (inFlight) { again = true; return inFlight }
    inFlight = (async () => {
      do {
        again = false
        const fromLive = liveOnly
        liveOnly = true
        await Promise.all([loadItems(fromLive), loadTags()])
      } while (again && state.bank) // no bank any more (it is being deleted): nothing to ask
    })().finally(() => { inFlight = null })
    return inFlight
  }

  // While the person edits a row or reads a history, memories arriving live are held (and
  // counted in the summary line, which has a fixed height) instead of pushing that row down;
  // rows already shown still update in place. Finishing the edit, or "show", lets them in.
  let held = 0
  const showHeld = h('button', { type: 'button', class: 'mw-btn mw-small mw-held', hidden: true, on: { click: () => { held = 0; refresh() } } })
  summary.append(' ', showHeld)
  function holding() {
    return [...rows.values()].some((row) => row.busy())
  }

  async function loadItems(fromLive) {
    const bank = state.bank
    const base = { bank }
    if (state.tag) base.tag = state.tag
    if (state.history) base.include_superseded = true
    try {
      if (state.query) {
        const result = await ctx.call('memory::recall', { ...base, query: state.query, limit: SEARCH_LIMIT, mode: state.mode }, { quiet: true })
        if (bank !== state.bank) return
        unembedded = result.retrieval === 'semantic-unavailable'
        render(result.memories.map((hit) => ({ memory: hit.memory, score: hit.score })), fromLive)
        // At the limit there may be more than were asked for: "50 results" read as all that match.
        const count = result.memories.length >= SEARCH_LIMIT
          ? `the best ${plural(result.memories.length, 'result')}` : plural(result.memories.length, 'result')
        const more = result.memories.length >= SEARCH_LIMIT ? ' (more may match: refine the search or pick a tag)' : ''
        // Within the tag chip pressed, said as the list says it: else a search that found nothing
        // in the tag read as nothing in the bank.
        const within = state.tag ? ` tagged #${state.tag}` : ''
        setText(summaryText, `${count} for “${state.query}”${within}${more} · retrieval ${result.retrieval}`)
        summary.dataset.retrieval = result.retrieval
        pager.hidden = true
      } else {
        const result = await ctx.call('memory::list', { ...base, limit: PAGE, offset: state.offset }, { quiet: true })
        if (bank !== state.bank) return
        unembedded = false
        if (result.total > 0 && state.offset >= result.total) {
          state.offset = Math.max(0, Math.floor((result.total - 1) / PAGE) * PAGE)
          again = true
          return
        }
        if (render(result.memories.map((memory) => ({ memory, score: null })), fromLive)) return
        const shown = result.memories.length
        setText(summaryText, `${plural(result.total, state.history ? 'record' : 'memory', state.history ? 'records' : 'memories')}${state.tag ? ` tagged #${state.tag}` : ''}, newest first`)
        delete summary.dataset.retrieval
        pager.hidden = result.total <= PAGE
        const n = (value) => value.toLocaleString() // as the summary writes them: "1,001"
        setText(pageText, shown ? `${n(state.offset + 1)}–${n(state.offset + shown)} of ${n(result.total)}` : '')
        const active = el.ownerDocument.activeElement
        prev.disabled = state.offset === 0
        next.disabled = state.offset + shown >= result.total
        // The button pressed to reach the first or the last page is disabled there: the focus on
        // it fell to <body> (a keyboard user started again from the top). It goes to the other.
        for (const [from, to] of [[prev, next], [next, prev]]) {
          if (active === from && from.disabled && !to.disabled) to.focus()
        }
      }
    } catch (err) {
      if (bank !== state.bank) return
      if (err.code === 'bank_not_found') { render([]); setText(summaryText, 'This bank does not exist (any more).'); return }
      setText(summaryText, `Could not load memories: ${err.code}: ${err.message}`)
    }
  }

  async function loadTags() {
    const bank = state.bank
    let tags = []
    try {
      ({ tags } = await ctx.call('memory::tags', { bank }, { quiet: true }))
    } catch { /* the list reports the bank's trouble */ }
    if (bank !== state.bank) return
    const shown = tags.slice(0, 30)
    // The tag picked, when it is not among the top chips (picked on a row): with its own count,
    // which the whole list has; 0 only when no live memory carries it any more.
    if (state.tag && !shown.some((t) => t.tag === state.tag)) shown.push(tags.find((t) => t.tag === state.tag) ?? { tag: state.tag, count: 0 })
    reconcile(chips, shown, (t) => t.tag, chip, updateChip)
    chips.hidden = shown.length === 0
  }

  function chip(tag) {
    const button = h('button', { type: 'button', class: 'mw-chip', on: { click: () => setTag(button.dataset.tag === state.tag ? null : button.dataset.tag) } })
    updateChip(button, tag)
    return button
  }
  function updateChip(button, tag) {
    button.dataset.tag = tag.tag
    setText(button, `#${tag.tag} ${tag.count}`)
    button.setAttribute('aria-pressed', String(tag.tag === state.tag))
  }
  function setTag(tag) {
    state.tag = tag
    state.offset = 0
    refresh()
  }

  /** `items` plus every row being edited that is no longer among them (deleted, retired or
   * changed elsewhere), each where it was: dropping it threw the person's draft away unasked. */
  function keepEdited(items) {
    const ids = new Set(items.map((i) => i.memory.id))
    const out = [...items]
    let at = 0 // where the next kept row goes: after the last listed row seen above it
    for (const node of list.children) {
      const id = node.dataset.key
      if (ids.has(id)) { at = out.findIndex((i) => i.memory.id === id) + 1; continue }
      const row = rows.get(id)
      if (!row?.editing()) continue
      row.leftList()
      out.splice(at, 0, row.item())
      at += 1
    }
    return out
  }

  /** A row about to go with the keyboard focus in it (deleted here or elsewhere): returns what
   * puts the focus on the same button of the row then in its place (else the one above), not
   * on the page's <body>, from where a keyboard user started again at the top. */
  function focusLeaving(items) {
    const active = el.ownerDocument.activeElement
    const nodes = [...list.children]
    const at = nodes.findIndex((node) => node.contains(active))
    if (at < 0 || items.some((i) => i.memory.id === nodes[at].dataset.key)) return () => {}
    const slot = [...nodes[at].querySelectorAll('.mw-memory-actions button')].indexOf(active)
    return () => {
      const node = list.children[Math.min(at, list.children.length - 1)]
      const buttons = node ? [...node.querySelectorAll('.mw-memory-actions button')] : []
      const target = [buttons[slot], ...buttons].find((b) => b && !b.disabled) ?? searchInput
      target.focus()
    }
  }

  /** Show `items`; returns true when live arrivals were held back instead. */
  function render(listed, fromLive = false) {
    const items = keepEdited(listed)
    const maxScore = Math.max(0, ...items.map((i) => i.score ?? 0))
    const fresh = items.filter((i) => !rows.has(i.memory.id)).length
    if (fromLive && fresh > 0 && holding()) {
      for (const item of items) rows.get(item.memory.id)?.update(item, maxScore)
      held = fresh
      setText(showHeld, `${plural(held, 'new memory', 'new memories')} — show`)
      showHeld.hidden = false
      return true
    }
    held = 0
    showHeld.hidden = true
    const refocus = focusLeaving(items)
    reconcile(list, items, (i) => i.memory.id, (item) => {
      const row = makeRow(item.memory)
      rows.set(item.memory.id, row)
      row.update(item, maxScore)
      return row.el
    }, (node, item) => rows.get(item.memory.id)?.update(item, maxScore))
    for (const id of [...rows.keys()]) if (!items.some((i) => i.memory.id === id)) rows.delete(id)
    refocus()
    empty.hidden = items.length > 0
    setText(empty, state.query && unembedded ? UNEMBEDDED
      : state.query ? (state.tag ? `Nothing tagged #${state.tag} matches that search.` : 'Nothing in this bank matches that search.') : state.tag ? 'No memory carries this tag.' : 'No memories in this bank yet. Save one above, or let extraction capture them from chat.')
    ctx.changed()
  }

  /** Memories `memory::forget-subject` erased: their rows leave at once, an open edit or history
   * of one too. A refresh held back (a row being edited or read) kept them, and an edit box was
   * kept for its draft, each showing text the erasure destroyed. */
  function forget(ids) {
    const nodes = [...list.children]
    const gone = nodes.filter((node) => ids.has(node.dataset.key))
    if (!gone.length) return
    const staying = nodes.filter((node) => !ids.has(node.dataset.key)).map((node) => ({ memory: { id: node.dataset.key } }))
    const refocus = focusLeaving(staying)
    const drafts = gone.filter((node) => rows.get(node.dataset.key)?.editing()).length
    for (const node of gone) {
      rows.delete(node.dataset.key)
      node.remove()
    }
    refocus()
    empty.hidden = list.children.length > 0
    if (drafts) ctx.ui.toast('The memory you were editing was erased (forget-subject): its edit is closed', 'error')
    ctx.changed()
  }

  // --- one row ---------------------------------------------------------------------------------
  function makeRow(initial) {
    let memory = initial
    let score = null
    let editing = null // {base revision, form}
    const text = h('p', { class: 'mw-memory-text', dir: 'auto' }) // RTL text lays out RTL
    const body = h('div', { class: 'mw-memory-body' }, text)
    const scoreBar = h('span', { class: 'mw-score-fill' })
    const scoreText = h('span', { class: 'mw-score-text' })
    const scoreBox = h('span', { class: 'mw-score', hidden: true, title: 'Recall score for this search' }, h('span', { class: 'mw-score-bar' }, scoreBar), scoreText)
    const meta = h('div', { class: 'mw-memory-meta' })
    const labels = h('div', { class: 'mw-memory-labels' })
    const pinButton = h('button', { type: 'button', class: 'mw-btn mw-small', on: { click: togglePin } })
    const editButton = h('button', { type: 'button', class: 'mw-btn mw-small', text: 'Edit', on: { click: startEdit } })
    const historyButton = h('button', { type: 'button', class: 'mw-btn mw-small', text: 'History', attrs: { 'aria-expanded': 'false' }, on: { click: toggleHistory } })
    const supersedeButton = h('button', { type: 'button', class: 'mw-btn mw-small', text: 'Supersede…', on: { click: supersede } })
    const deleteButton = h('button', { type: 'button', class: 'mw-btn mw-small mw-danger-text', text: 'Delete', on: { click: remove } })
    // A retired record (deleted, superseded, evicted, expired) comes back by saving its text
    // again, the API's own way (its refusal of an edit says so): shown with "show history",
    // where the delete dialog's "the record stays on disk" left the person no way back.
    const restoreButton = h('button', { type: 'button', class: 'mw-btn mw-small', text: 'Restore', hidden: true, title: 'Bring it back into recall (saves its text again, as stated now: its tags, entities, pin, category and lanes are kept)', on: { click: restore } })
    const historyBox = h('div', { class: 'mw-history', hidden: true })
    const lesson = h('div', { class: 'mw-lesson', hidden: true })
    const el = h('li', { class: 'mw-memory' },
      h('div', { class: 'mw-memory-main' }, body, scoreBox),
      lesson, labels, meta,
      h('div', { class: 'mw-memory-actions' }, pinButton, editButton, historyButton, supersedeButton, deleteButton, restoreButton),
      historyBox)

    function update(item, maxScore) {
      const previous = memory
      memory = item.memory
      score = item.score
      el.dataset.id = memory.id
      el.dataset.revision = String(memory.revision ?? 0)
      const live = memory.invalid_at === undefined || memory.invalid_at === null
      el.classList.toggle('mw-retired', !live)
      el.classList.toggle('mw-pinned', Boolean(memory.pinned))
      setText(text, memory.text)
      if (item.score !== null && item.score !== undefined) {
        scoreBox.hidden = false
        setText(scoreText, formatScore(item.score))
        scoreBar.style.width = `${maxScore > 0 ? Math.max(4, (item.score / maxScore) * 100) : 0}%`
      } else scoreBox.hidden = true
      renderLabels()
      renderLesson()
      renderMeta(live)
      setText(pinButton, memory.pinned ? 'Unpin' : 'Pin')
      pinButton.setAttribute('aria-pressed', String(Boolean(memory.pinned)))
      for (const b of [pinButton, editButton, deleteButton]) b.disabled = !live
      restoreButton.hidden = live
      // A pinned memory is the person's "keep this": the API never supersedes one (unpin first).
      supersedeButton.disabled = !live || Boolean(memory.pinned)
      supersedeButton.title = memory.pinned ? 'Pinned memories are never superseded: unpin it first' : 'Retire it in favour of another memory (kept in its history)'
      // Compared with the revision the draft is based on, not with what this row showed before:
      // a live refresh can land after "Load latest" already rebased the draft on this very
      // revision (a slow list answer), and must not say "changed elsewhere" again. Revisions
      // only grow, so an answer older than the draft's base says nothing either.
      if (editing && (memory.revision ?? 0) > editing.revision && !editing.refused) {
        editing.notice.hidden = false
        setText(editing.notice, `Changed elsewhere while you edit (now revision ${memory.revision}). Saving is refused until you load the latest.`)
        editing.reload.hidden = false
      }
      if (!historyBox.hidden && previous.revision !== memory.revision) loadHistory()
    }

    function renderLabels() {
      const nodes = [
        ...(memory.entities ?? []).map((entity) => h('span', { class: 'mw-badge mw-entity', text: entity, title: 'entity' })),
        ...(memory.tags ?? []).map((tag) => h('button', { type: 'button', class: 'mw-chip mw-chip-small', text: `#${tag}`, on: { click: () => setTag(tag) } })),
      ]
      labels.replaceChildren(...nodes)
      labels.hidden = nodes.length === 0
    }

    // A lesson's card (title, recommendation) is all a model is shown of it, and its anchors are
    // what a tool call must name to earn it: both are shown, or a person cannot review lessons.
    function renderLesson() {
      const anchors = memory.anchors ?? {}
      const groups = [
        ['files', anchors.files ?? []],
        ['folders', anchors.folders ?? []],
        ['identifiers', anchors.identifiers ?? []],
        ['keywords', (anchors.keyword_groups ?? []).map((group) => group.join(' '))],
      ].filter(([, values]) => values.length)
      const nodes = []
      if (memory.title || memory.recommendation) {
        nodes.push(h('p', { class: 'mw-lesson-card', dir: 'auto' },
          memory.title ? h('strong', { text: memory.title }) : null,
          memory.title && memory.recommendation ? ' — ' : null,
          memory.recommendation ?? null))
      }
      if (groups.length) {
        nodes.push(h('p', { class: 'mw-muted mw-lesson-anchors' }, 'applies to ',
          groups.map(([kind, values], i) => [i ? ' · ' : null, `${kind}: `,
            values.map((value, j) => [j ? ', ' : null, h('span', { class: 'mw-mono', text: value })])])))
      }
      lesson.replaceChildren(...nodes)
      lesson.hidden = nodes.length === 0
    }

    function renderMeta(live) {
      const [label, why] = CONFIDENCE[memory.confidence] ?? [memory.confidence, '']
      const parts = []
      if (memory.pinned) parts.push(h('span', { class: 'mw-badge mw-badge-pin', text: 'pinned' }))
      if (!live) parts.push(h('span', { class: 'mw-badge mw-badge-retired', text: memory.superseded_by ? `superseded by ${memory.superseded_by}` : (memory.invalid_reason ?? 'deleted') }))
      if (memory.category) parts.push(h('span', { class: 'mw-badge', text: memory.category, title: 'Category' }))
      if (memory.subject) parts.push(h('span', { class: 'mw-badge', text: `about ${memory.subject}`, title: 'Subject: who this memory is about' }))
      parts.push(h('span', { text: label, title: why }))
      parts.push(h('span', { text: `seen ×${(memory.corroboration ?? 0) + 1}`, title: `Re-observed ${memory.corroboration ?? 0} time(s) after the first` }))
      const updated = h('time', { title: `updated ${absoluteTime(memory.updated_at)} · created ${absoluteTime(memory.created_at)}`, attrs: { datetime: isoTime(memory.updated_at) } })
      setAgo(updated, memory.updated_at)
      parts.push(updated)
      if (memory.source?.session_id) parts.push(h('span', { class: 'mw-mono', text: `session ${memory.source.session_id.slice(0, 12)}`, title: `Captured in session ${memory.source.session_id}` }))
      if (memory.source?.agent) parts.push(h('span', { text: `by ${memory.source.agent}`, title: `Captured from a turn run by ${memory.source.agent}` }))
      // The association lanes (C21): recall also finds a memory by these, so they are shown whole on hover.
      for (const [lane, label, why] of [['intention', 'goal', 'what the person was trying to do'], ['context', 'context', 'the conversation it was formed in']]) {
        const value = memory[lane]
        if (value) parts.push(h('span', { class: 'mw-lane', text: `${label}: ${value.length > 60 ? value.slice(0, 59) + '…' : value}`, title: `${lane} — ${why}: ${value}` }))
      }
      parts.push(h('span', { class: 'mw-mono', text: `rev ${memory.revision ?? 0}`, title: memory.id }))
      meta.replaceChildren(...parts)
    }

    async function mutate(fn, payload, done) {
      try {
        const result = await ctx.call(fn, { bank: state.bank, id: memory.id, expected_revision: memory.revision ?? 0, ...payload }, { quiet: true })
        done?.(result)
      } catch (err) {
        const why = err.code === 'conflict' ? `${err.message} — the list was refreshed` : `${err.code}: ${err.message}`
        ctx.ui.toast(`Not done: ${why}`, 'error')
        el.dataset.error = err.code
      }
      refresh()
    }

    function togglePin() {
      const from = memory.revision ?? 0
      mutate('memory::pin', { pinned: !memory.pinned }, (r) => {
        ctx.ui.toast(r.memory.pinned ? 'Pinned' : 'Unpinned')
        // Pinning the memory being edited is this tab's own change, made against the draft's
        // revision and of a field the form does not carry: the draft follows it, rather than
        // being told of a change "elsewhere" and refused as stale.
        if (editing && editing.revision === from && !editing.refused && !editing.left) {
          editing.revision = r.memory.revision ?? from
          editing.notice.hidden = true
          editing.reload.hidden = true
        }
      })
    }

    async function remove() {
      // The revision the dialog names: a change landing while it is open (the row updates live
      // behind it) is refused as stale instead of deleted on a confirmation given for other text.
      const shown = memory.revision ?? 0
      // Pinned is the person's own "keep this" (no automatic path touches it): said first.
      const pinned = Boolean(memory.pinned)
      const ok = await ctx.ui.confirm({
        title: pinned ? 'Delete this pinned memory?' : 'Delete this memory?',
        body: [
          ...(pinned ? ['It is pinned: nothing automatic would ever retire it.'] : []),
          memory.text, 'It leaves recall at once; the record stays on disk and in its history.'],
        confirm: 'Delete memory', danger: true,
      })
      if (ok) mutate('memory::delete', { expected_revision: shown }, () => ctx.ui.toast('Memory deleted'))
    }

    // One restore at a time: a double click sent two saves, the second counted as the memory
    // seen again (a "reinforced" revision) and a second "Memory restored".
    let restoring = false
    async function restore() {
      if (restoring) return
      restoring = true
      const pressed = el.ownerDocument.activeElement
      const shown = memory
      const bank = state.bank // both calls below go to the bank the row was read from
      try {
        // Superseded is "no longer true, replaced by that one": brought back, both are recalled
        // as current. Said, and asked, as the delete dialog asks. (The button is disabled only
        // after: the dialog gives the focus back to it when cancelled.)
        const ok = !shown.superseded_by || await ctx.ui.confirm({
          title: 'Restore a superseded memory?',
          body: [shown.text, `It was replaced by memory ${shown.superseded_by}, which stays in recall: both will be recalled as current.`],
          confirm: 'Restore it too',
        })
        if (!ok) return
        restoreButton.disabled = true
        await restoreShown(bank, shown) // a change made meanwhile is refused there, by its revision
      } finally {
        restoring = false
        restoreButton.disabled = false
      }
      await refresh()
      keepFocus(pressed, editButton) // "Restore" is hidden once restored: on to the row
    }

    /** Save `shown`'s text again, once it is known to be still the record on disk: a row can be
     * stale (a stream down, a poll not come yet), and a save of its text then wrote words a
     * forget-subject erased, or a second memory of a text another tab had changed since. */
    async function restoreShown(bank, shown) {
      const refused = (why) => ctx.ui.toast(`Not restored: ${why}`, 'error')
      let latest
      try {
        ({ memory: latest } = await ctx.call('memory::get', { bank, id: shown.id }, { quiet: true }))
      } catch (err) {
        refused(err.code === 'memory_not_found' ? 'it is no longer on disk (erased by a forget-subject, or its bank replaced); nothing was saved' : `${err.code}: ${err.message}`)
        return
      }
      if ((latest.revision ?? 0) !== (shown.revision ?? 0)) {
        refused(`it changed elsewhere since this list was read (now revision ${latest.revision ?? 0}); nothing was saved`)
        return
      }
      const payload = { bank, text: shown.text }
      if (shown.subject) payload.subject = shown.subject // the same record: text and subject
      let result
      try {
        result = await ctx.call('memory::save', payload, { quiet: true })
      } catch (err) {
        refused(`${err.code}: ${err.message}`)
        return
      }
      // A save brings back the record holding the text: another live one, when there is one
      // (edited to these words), which is then only counted as seen again.
      const other = result.memory.id !== shown.id
      if (other && !result.created) {
        refused(`its text is already live as memory ${result.memory.id}, which counts it as seen again; this record stays in history`)
        return
      }
      // Restored into a full bank: room is made as for any save, and said.
      const evicted = result.evicted?.length ? ` (${plural(result.evicted.length, 'memory', 'memories')} evicted at the bank's cap)` : ''
      ctx.ui.toast(other ? `Restored as memory ${result.memory.id}, a later record of the same text${evicted}` : `Memory restored${evicted}`)
    }

    async function supersede() {
      const done = await openSupersede(ctx, state.bank, memory)
      if (!done) return
      ctx.ui.toast(done.reinforced ? 'Superseded and merged into its replacement' : 'Superseded')
      refresh()
    }

    function startEdit() {
      if (editing) { editing.textarea.focus(); return }
      const textarea = h('textarea', { class: 'mw-input mw-edit-text', dir: 'auto', value: memory.text, rows: 3, attrs: { 'aria-label': 'Edit memory text' } })
      const tags = h('input', { class: 'mw-input', value: (memory.tags ?? []).join(', '), attrs: { 'aria-label': 'Tags' } })
      const entities = h('input', { class: 'mw-input', value: (memory.entities ?? []).join(', '), attrs: { 'aria-label': 'Entities' } })
      const notice = h('p', { class: 'mw-notice', hidden: true, attrs: { role: 'alert' } })
      // Rebase the draft on the latest revision: the person's text stays; the fields they did not
      // touch take the other writer's values instead of silently reverting them.
      const rebase = async () => {
        const pressed = el.ownerDocument.activeElement
        let latest
        try {
          ({ memory: latest } = await ctx.call('memory::get', { bank: state.bank, id: memory.id }, { quiet: true }))
        } catch (err) {
          setText(notice, `Could not load the latest: ${err.code}: ${err.message}`)
          return
        }
        if (editing?.reload !== reload) return // this edit ended (or another began) meanwhile
        // The text too, when the person left it as it was: kept, saving their tags put the old
        // text back over the other writer's.
        if (textarea.value === editing.original) {
          textarea.value = latest.text
          editing.original = textarea.value // as the box reads it back
        }
        for (const [input, key] of [[tags, 'tags'], [entities, 'entities']]) {
          if (input.value === editing[key]) input.value = editing[key] = (latest[key] ?? []).join(', ')
        }
        editing.revision = latest.revision ?? 0
        editing.refused = false
        notice.hidden = true
        reload.hidden = true
        keepFocus(pressed, textarea) // "Load latest" is hidden once loaded: on to the draft
      }
      const reload = h('button', { type: 'button', class: 'mw-btn', text: 'Load latest (keep my text)', hidden: true, on: { click: rebase } })
      const form = h('form', { class: 'mw-edit', on: { submit: (e) => { e.preventDefault(); saveEdit() }, keydown: onEditKey, input: () => ctx.changed() } }, // the host's dirty guard follows the draft
        textarea,
        h('div', { class: 'mw-edit-row' },
          h('label', { class: 'mw-field' }, h('span', { text: 'tags' }), tags),
          h('label', { class: 'mw-field' }, h('span', { text: 'entities' }), entities)),
        notice,
        h('div', { class: 'mw-card-actions' },
          h('button', { type: 'submit', class: 'mw-btn mw-primary', text: 'Save' }),
          h('button', { type: 'button', class: 'mw-btn', text: 'Cancel', on: { click: cancelEdit } }),
          reload))
      editing = {
        // The text as the box reads it back (`\r\n` comes back `\n`): the memory's own text
        // made an untouched edit of one written with Windows line ends count as changed.
        revision: memory.revision ?? 0, textarea, notice, reload, form, original: textarea.value,
        tags: tags.value, entities: entities.value, tagsInput: tags, entitiesInput: entities,
      }
      body.replaceChildren(form)
      el.classList.add('mw-editing')
      textarea.focus()
      ctx.changed()
    }

    // Esc ends an untouched edit at once; a changed draft is not dropped unasked (the key is
    // pressed for many reasons, and the text is gone for good). Ctrl/⌘-S saves, as in the rules
    // editor: here it opened the browser's "Save page as" instead.
    async function onEditKey(event) {
      if ((event.metaKey || event.ctrlKey) && event.key.toLowerCase() === 's' && !event.isComposing) {
        event.preventDefault()
        if (editing) saveEdit()
        return
      }
      if (event.key !== 'Escape' || event.isComposing) return
      event.preventDefault() // else this very key press cancels the dialog it opens
      const session = editing
      if (!session) return
      if (draftChanged()) {
        const ok = await ctx.ui.confirm({
          title: 'Discard your changes to this memory?',
          body: 'The memory stays as it is saved; your unsaved text is lost.',
          confirm: 'Discard my changes', danger: true,
        })
        if (editing !== session) return
        if (!ok) { session.textarea.focus(); return }
      }
      cancelEdit()
    }

    function draftChanged() {
      // Tags and entities are part of the draft too: an edit of only those is unsaved work.
      return Boolean(editing) && (editing.textarea.value !== editing.original
        || editing.tagsInput.value !== editing.tags || editing.entitiesInput.value !== editing.entities)
    }

    function cancelEdit() {
      const left = editing?.left
      // The form goes, and the focus in it with it (to <body>: a keyboard user started again
      // from the top of the page): it moves to the row's Edit button instead.
      const focused = Boolean(editing?.form.contains(el.ownerDocument.activeElement))
      editing = null
      body.replaceChildren(text)
      if (focused) editButton.focus()
      el.classList.remove('mw-editing')
      ctx.changed()
      if (held || left) refresh() // a row kept only for its draft goes now
    }

    /** This row is kept on screen only for its draft: its memory left the list. */
    function leftList() {
      if (editing.left) return
      editing.left = true
      editing.notice.hidden = false
      setText(editing.notice, 'This memory is no longer in this list (deleted or changed elsewhere, or outside this search, tag or page). Your text is still here: copy it, or save to try.')
    }

    async function saveEdit() {
      const session = editing // the answer may come back after this edit was cancelled
      // One save of a draft at a time, as the rules editor holds its Save: a repeating Ctrl/⌘-S
      // sent an update per press, on one base revision, all but the first refused as conflicts.
      if (!session || session.saving) return
      if (!draftChanged()) {
        // Nothing to write (Ctrl/⌘-S is pressed out of habit): the edit ends as it would, but
        // "Memory updated" is not said of a memory nobody changed.
        cancelEdit()
        ctx.ui.toast('No changes to save')
        return
      }
      const payload = { bank: state.bank, id: memory.id, expected_revision: session.revision, text: session.textarea.value }
      // Tags and entities only when the person changed them: shown joined by commas, a label that
      // holds one (`Acme, Inc.`) came back split in two from an edit of the text alone.
      if (session.tagsInput.value !== session.tags) payload.tags = splitList(session.tagsInput.value)
      if (session.entitiesInput.value !== session.entities) payload.entities = splitList(session.entitiesInput.value)
      session.saving = true
      try {
        await ctx.call('memory::update', payload, { quiet: true })
      } catch (err) {
        session.saving = false
        if (editing !== session) return
        session.notice.hidden = false
        setText(session.notice, err.code === 'conflict'
          ? `Not saved: ${err.message}. Someone changed this memory after you started editing; your text is still here.`
          : `Not saved: ${err.code}: ${err.message}`)
        if (err.code === 'conflict') {
          session.refused = true // this message says more than a later "changed elsewhere"
          session.reload.hidden = false
        }
        return
      }
      if (editing === session) cancelEdit()
      ctx.ui.toast('Memory updated')
      refresh()
    }

    async function toggleHistory() {
      const open = historyBox.hidden
      historyBox.hidden = !open
      historyButton.setAttribute('aria-expanded', String(open))
      if (open) await loadHistory()
      else if (held) refresh()
    }

    // Opening the history and a live change can each ask for it: only the latest answer is
    // shown, so a slow older one cannot land last and drop the newest revision.
    let historyAsked = 0
    async function loadHistory() {
      const asked = ++historyAsked
      try {
        const { revisions } = await ctx.call('memory::history', { bank: state.bank, id: memory.id }, { quiet: true })
        if (asked !== historyAsked) return
        // `memory::compact` drops a memory's older revisions: the history then starts later.
        const compacted = (revisions[0]?.revision ?? 0) > 0 ? ' (earlier ones compacted)' : ''
        historyBox.replaceChildren(
          h('h4', { class: 'mw-history-title', text: `${plural(revisions.length, 'revision')}, oldest first${compacted}` }),
          h('ol', { class: 'mw-revisions' }, revisions.map((rev, i) => revision(rev, revisions[i - 1]))))
      } catch (err) {
        if (asked !== historyAsked) return
        historyBox.replaceChildren(h('p', { class: 'mw-notice', text: `History unavailable: ${err.code}: ${err.message}` }))
      }
    }

    function revision(rev, before) {
      const when = h('time', { class: 'mw-muted', title: absoluteTime(rev.updated_at) })
      setAgo(when, rev.updated_at)
      // The oldest revision kept is the creation only when it is revision 0: after a compaction
      // it is a later one (an edit, a pin), and "created" named a change that never happened.
      const kind = !before ? ((rev.revision ?? 0) === 0 ? 'created' : 'oldest kept (earlier revisions compacted)')
        : rev.invalid_at && rev.superseded_by ? `superseded by ${rev.superseded_by}`
          // Retired by an automatic path (`evicted` at capacity, `expired` by retention): said
          // as such, as the row's badge does — nobody deleted it.
          : rev.invalid_at && !before.invalid_at ? (rev.invalid_reason ?? 'deleted')
            : before.invalid_at && !rev.invalid_at ? 'restored'
              : rev.text !== before.text ? 'text edited'
                : (rev.corroboration ?? 0) > (before.corroboration ?? 0) ? 'reinforced'
                  : rev.pinned !== before.pinned ? (rev.pinned ? 'pinned' : 'unpinned') : 'updated'
      const changes = []
      if (before) {
        if (String(rev.tags ?? []) !== String(before.tags ?? [])) changes.push(`tags: ${(rev.tags ?? []).join(', ') || '(none)'}`)
        if (String(rev.entities ?? []) !== String(before.entities ?? [])) changes.push(`entities: ${(rev.entities ?? []).join(', ') || '(none)'}`)
      }
      return h('li', { class: 'mw-revision', dataset: { revision: String(rev.revision ?? 0) } },
        h('div', { class: 'mw-revision-head' },
          h('span', { class: 'mw-mono', text: `rev ${rev.revision ?? 0}` }),
          h('span', { class: 'mw-revision-kind', text: kind }),
          when),
        !before || rev.text !== before.text ? h('p', { class: 'mw-revision-text', dir: 'auto', text: rev.text }) : null,
        changes.length ? h('p', { class: 'mw-muted', text: changes.join(' · ') }) : null)
    }

    return {
      el, update, leftList,
      item: () => ({ memory, score }),
      editing: () => Boolean(editing),
      dirty: draftChanged,
      busy: () => Boolean(editing) || !historyBox.hidden,
    }
  }

  // --- actions ---------------------------------------------------------------------------------
  async function onSave(event) {
    event.preventDefault()
    const text = saveText.value.trim()
    if (text.length < 3) {
      ctx.ui.toast('A memory needs at least 3 characters', 'error')
      return
    }
    const payload = { bank: state.bank, text, tags: splitList(saveTags.value), pinned: savePinned.checked }
    let result
    try {
      result = await ctx.call('memory::save', payload)
    } catch {
      return // the toast said why; the text stays in the box (a throw here was an uncaught error)
    }
    saveText.value = ''
    saveTags.value = ''
    savePinned.checked = false
    ctx.changed()
    const redacted = result.redacted?.length ? ` (redacted: ${result.redacted.join(', ')})` : ''
    ctx.ui.toast((result.created ? 'Saved' : 'Already known: reinforced') + redacted)
    refresh()
  }

  let searchTimer = null
  function onSearchInput() {
    clearTimeout(searchTimer)
    searchTimer = setTimeout(runSearch, SEARCH_DEBOUNCE_MS)
  }
  function runSearch() {
    clearTimeout(searchTimer)
    const query = searchInput.value.trim()
    if (query === state.query) return
    state.query = query
    state.offset = 0
    refresh()
  }

  function page(step) {
    state.offset = Math.max(0, state.offset + step * PAGE)
    refresh()
    list.scrollIntoView?.({ block: 'start' })
  }

  return {
    el,
    setBank(name) {
      state.bank = name
      state.offset = 0
      state.tag = null
      rows.clear()
      list.replaceChildren()
      chips.replaceChildren()
      setText(summaryText, '')
      refresh()
    },
    changed({ items }) {
      if (items.has(state.bank)) refresh({ live: true })
    },
    erased(banks) {
      const ids = banks.get(state.bank)
      if (ids) forget(ids)
    },
    resync: () => refresh({ live: true }),
    focusSearch() {
      searchInput.focus()
      searchInput.select()
    },
    dirty: () => [...rows.values()].some((row) => row.dirty()),
    // A new memory typed and not saved yet: the page asks before it is closed or reloaded (it
    // was lost without a word), not before a bank switch, which keeps the box's text.
    unsaved: () => saveText.value.trim() !== '',
  }
}

// The rules panel: one editor per rule file. A save carries the revision the editor started from
// (`expected_revision`), so two editors never overwrite each other silently: the second save is
// refused and shown as a conflict, with the person's text kept. Emptying a rule deletes it, after
// a confirmation. The `learned` rule is grown by extraction and marked as such.

import { h, keepFocus, reconcile, setAgo, setText } from './dom.js'
import { absoluteTime, asTyped, NAME_PATTERN, slugify, typedName } from './format.js'

const LEARNED = 'learned'

export function createRulesPanel(ctx) {
  const list = h('div', { class: 'mw-rule-list' })
  const empty = h('p', { class: 'mw-empty', hidden: true, text: 'No rules in this bank yet. Add one below: it is injected into every new session\'s system prompt.' })
  const nameInput = h('input', {
    class: 'mw-input', placeholder: 'rule-name', maxLength: 64,
    attrs: { 'aria-label': 'New rule name', autocomplete: 'off', spellcheck: 'false' },
    on: { input: () => { nameInput.value = typedName(nameInput.value) } },
  })
  const addForm = h('form', { class: 'mw-inline-form', on: { submit: onAdd } },
    nameInput, h('button', { type: 'submit', class: 'mw-btn', text: 'Add rule' }))
  // Every rule is saved whole, but a new session's system prompt gets at most `max_rule_chars`
  // characters of them (name order, `learned` last; the rest is cut or left out behind a marker
  // that says "trim it in the memory page"): this note names the rules that do not fit.
  const budgetNote = h('p', { class: 'mw-notice mw-rule-budget', hidden: true, attrs: { role: 'status' } })
  // A list that could not be read, said here until one is: as a toast it came again at every
  // live refresh and every poll (15 s) while the server was down, whatever tab was open.
  const loadNote = h('p', { class: 'mw-notice mw-rule-load', hidden: true, attrs: { role: 'status' } })
  const el = h('div', { class: 'mw-rules' },
    h('p', { class: 'mw-hint', text: 'Rules are markdown, injected whole into the system prompt of every session on this bank. A running session gets a change as one appended update; corrections heard in chat grow the learned rule.' }),
    loadNote, budgetNote, list, empty, addForm)

  const cards = new Map() // name → card state
  let bank = null
  let loaded = null // the bank whose rules are shown

  // One list call at a time, run again when asked meanwhile: two answers racing back (a burst of
  // live events on a loaded machine) could otherwise land oldest last and show a rule as it was.
  let loading = null
  let loadAgain = false
  function load() {
    if (!bank) return Promise.resolve()
    if (loading) { loadAgain = true; return loading }
    loading = (async () => {
      do {
        loadAgain = false
        await loadOnce()
      } while (loadAgain && bank)
    })().finally(() => { loading = null })
    return loading
  }

  async function loadOnce() {
    const current = bank
    const budget = maxRuleChars() // asked each time: the settings panel may have changed it
    let rules
    try {
      ({ rules } = await ctx.call('memory::rule::list', { bank: current }, { quiet: true }))
    } catch (err) {
      if (err.code === 'bank_not_found') rules = []
      else {
        if (current !== bank) return
        setText(loadNote, `Could not load the rules: ${err.code}: ${err.message}`)
        loadNote.hidden = false
        return
      }
    }
    const max = await budget
    if (current !== bank) return
    loadNote.hidden = true
    if (loaded !== current) { cards.clear(); list.replaceChildren(); loaded = current }
    merge(rules)
    renderBudget(rules, max)
  }

  async function maxRuleChars() {
    try {
      const view = await ctx.transport.settings()
      return view.fields.find((f) => f.name === 'max_rule_chars')?.value ?? null
    } catch {
      return null // unknown: no note rather than a wrong one
    }
  }

  /** The injection's own walk (core/injection.py `render_section`), over the saved rules. */
  function renderBudget(rules, max) {
    const over = []
    if (typeof max === 'number') {
      const ordered = [...rules].sort((a, b) => Number(a.name === LEARNED) - Number(b.name === LEARNED) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      let left = max
      for (const rule of ordered) {
        const length = [...rule.content.trim()].length // characters, not UTF-16 units
        if (!length) continue
        if (!over.length && length <= left) left -= length
        else over.push(rule.name)
      }
    }
    budgetNote.hidden = over.length === 0
    setText(budgetNote, over.length
      ? `Over the injection budget (max_rule_chars = ${max} characters for all rules): a new session's system prompt gets ${over.map((name) => `${name}.md`).join(', ')} cut or left out. Trim the rules, or raise max_rule_chars in Settings; Preview shows exactly what a turn gets.`
      : '')
  }

  function merge(rules) {
    const seen = new Set(rules.map((r) => r.name))
    for (const rule of rules) {
      const card = cards.get(rule.name)
      if (!card) cards.set(rule.name, makeCard(rule))
      else card.serverChanged(rule)
    }
    for (const [name, card] of cards) {
      if (!seen.has(name) && !card.isNew) {
        if (card.dirty()) card.goneElsewhere()
        else cards.delete(name)
      }
    }
    const ordered = [...cards.values()].sort((a, b) => a.name.localeCompare(b.name))
    reconcile(list, ordered, (c) => c.name, (c) => c.el, () => {})
    empty.hidden = cards.size > 0
    ctx.changed()
  }

  function makeCard(rule) {
    const learned = rule.name === LEARNED
    let base = rule
    let status = 'clean'
    const textarea = h('textarea', {
      class: 'mw-editor', dir: 'auto', value: rule.content, spellcheck: false,
      attrs: { 'aria-label': `Rule ${rule.name}`, rows: 6 },
      // As the box reads it (a hand-edited file's `\r\n` comes back `\n`): typed back to what is
      // saved, the rule is clean again.
      on: { input: () => setStatus(textarea.value === asTyped(base.content) ? 'clean' : 'dirty'), keydown: onKey },
    })
    const stateText = h('span', { class: 'mw-rule-state', attrs: { 'aria-live': 'polite' } })
    const when = h('span', { class: 'mw-muted' })
    const saveButton = h('button', { type: 'button', class: 'mw-btn mw-primary', text: 'Save', on: { click: () => save() } })
    const revertButton = h('button', { type: 'button', class: 'mw-btn', text: 'Revert', on: { click: () => revert() } })
    const deleteButton = h('button', { type: 'button', class: 'mw-btn mw-ghost mw-danger-text', text: 'Delete…', on: { click: () => remove() } })
    const notice = h('div', { class: 'mw-notice', hidden: true, attrs: { role: 'alert' } })
    const theirs = h('pre', { class: 'mw-theirs', hidden: true })
    const el = h('article', { class: 'mw-card mw-rule', dataset: { rule: rule.name } },
      h('header', { class: 'mw-card-header' },
        h('h3', { class: 'mw-rule-name', text: `${rule.name}.md` }),
        learned ? h('span', { class: 'mw-badge mw-badge-auto', text: 'auto-managed', title: 'Extraction appends the standing instructions it hears in chat here (rule_learning_enabled). Edit or delete lines freely; new ones keep arriving.' }) : null,
        when, stateText),
      learned ? h('p', { class: 'mw-hint', text: 'Grown by extraction from corrections and standing instructions heard in chat. Your edits are kept; new lines keep arriving.' }) : null,
      textarea, notice, theirs,
      h('div', { class: 'mw-card-actions' }, saveButton, revertButton, deleteButton))

    const card = {
      name: rule.name, el, isNew: false,
      dirty: () => status === 'dirty' || status === 'conflict',
      serverChanged(next) {
        const moved = next.revision !== base.revision || next.content !== base.content
        if (!moved) return
        if (status === 'clean') {
          base = next
          textarea.value = next.content
          renderWhen()
          hideNotice()
        } else if (status === 'conflict') {
          base = { ...base, latest: next } // the refusal on screen already says it
        } else if (status === 'saving') {
          // Most likely this very save, seen live before its own answer: write() re-reads the
          // rule when that answer comes; a save that lost to another writer is refused instead.
        } else {
          base = { ...base, latest: next }
          showNotice('This rule was changed elsewhere while you were editing. Saving now is refused; you can compare, overwrite or discard.', true)
        }
      },
      goneElsewhere() {
        showNotice('This rule was deleted elsewhere. Save to create it again with your text.', false)
        base = { ...base, revision: '' }
      },
    }

    function renderWhen() {
      setAgo(when, base.updated_at || null, 'saved ')
      when.title = absoluteTime(base.updated_at)
    }
    function setStatus(next) {
      status = next
      el.dataset.status = next
      setText(stateText, { clean: '', dirty: 'unsaved changes', saving: 'saving…', conflict: 'conflict' }[next])
      saveButton.disabled = next === 'clean' || next === 'saving'
      revertButton.disabled = next === 'clean' || next === 'saving'
      ctx.changed()
    }
    function showNotice(text, offerActions) {
      notice.replaceChildren(h('p', { text }))
      if (offerActions) {
        notice.append(h('div', { class: 'mw-notice-actions' },
          h('button', { type: 'button', class: 'mw-btn', text: 'Compare with theirs', on: { click: compare } }),
          h('button', { type: 'button', class: 'mw-btn mw-danger', text: 'Overwrite with mine', on: { click: overwrite } }),
          h('button', { type: 'button', class: 'mw-btn', text: 'Discard mine', on: { click: discard } })))
      }
      notice.hidden = false
    }
    function hideNotice() {
      notice.hidden = true
      theirs.hidden = true
    }
    async function latest() {
      const { rules } = await ctx.call('memory::rule::list', { bank }, { quiet: true })
      return rules.find((r) => r.name === rule.name) ?? null
    }
    /** `latest()` for a button: a failed read is said (the click did nothing visible), then null. */
    async function latestOrSay() {
      try {
        return { current: await latest() }
      } catch (err) {
        ctx.ui.toast(`Rule ${rule.name}: could not read the saved rule: ${err.code}: ${err.message}`, 'error')
        return null
      }
    }
    async function compare() {
      const read = await latestOrSay()
      if (!read) return
      const { current } = read
      theirs.textContent = current ? current.content : '(the rule no longer exists)'
      theirs.hidden = false
    }
    async function overwrite() {
      const read = await latestOrSay()
      if (!read) return
      const { current } = read
      base = { ...base, revision: current ? current.revision : '' }
      await save()
    }
    async function discard() {
      const pressed = el.ownerDocument.activeElement
      const read = await latestOrSay()
      if (!read) return
      const { current } = read
      base = current ?? { ...base, content: '', revision: '' }
      textarea.value = base.content
      hideNotice()
      setStatus('clean')
      keepFocus(pressed, textarea) // the notice and its buttons are gone
      renderWhen()
      if (!current) { cards.delete(rule.name); el.remove(); empty.hidden = cards.size > 0 }
    }
    function revert() {
      const pressed = el.ownerDocument.activeElement
      textarea.value = base.latest ? base.latest.content : base.content
      if (base.latest) base = base.latest
      hideNotice()
      setStatus('clean')
      keepFocus(pressed, textarea) // Revert is disabled once clean
      renderWhen()
    }
    async function remove() {
      // The revision the person saw when asking: a change landing while the dialog is open (the
      // editor behind it follows it live, extraction appends to `learned`) is refused as stale,
      // not deleted on a confirmation given for other text.
      const shown = base.revision
      const ok = await ctx.ui.confirm({
        title: `Delete rule "${rule.name}"?`,
        body: 'Its file is removed and new sessions on this bank no longer get it in their system prompt.',
        confirm: 'Delete rule', danger: true,
      })
      if (ok) await write('', shown)
    }
    async function save() {
      const content = textarea.value
      if (!content.trim()) {
        const ok = await ctx.ui.confirm({
          title: `Empty rule "${rule.name}"?`,
          body: 'An empty rule is deleted: its file is removed and new sessions no longer get it.',
          confirm: 'Delete rule', danger: true,
        })
        if (!ok) return
      }
      await write(content)
    }
    async function write(content, expected = base.revision) {
      const before = status
      // Save (or Overwrite) is disabled while saving and after: the focus on it goes to the editor.
      const pressed = el.contains(el.ownerDocument.activeElement) ? el.ownerDocument.activeElement : null
      setStatus('saving')
      const payload = { bank, name: rule.name, content }
      if (typeof expected === 'string') payload.expected_revision = expected
      let saved
      try {
        saved = await ctx.call('memory::rule::set', payload, { quiet: true })
      } catch (err) {
        if (err.code === 'conflict' && expected !== base.revision) {
          // A delete asked for an older revision than the editor now shows: nothing of the
          // person's is unsaved, the rule just is not what they chose to delete.
          setStatus(before)
          showNotice(`Not deleted: ${err.message}. The rule changed after you asked to delete it; read it again, and delete it again if you still mean to.`, false)
        } else if (err.code === 'conflict') {
          setStatus('conflict')
          showNotice(`Not saved: ${err.message}. Someone else saved this rule after you opened it; your text is still here.`, true)
        } else {
          setStatus('dirty')
          ctx.ui.toast(`Rule ${rule.name}: ${err.code}: ${err.message}`, 'error')
        }
        keepFocus(pressed, textarea)
        return
      }
      hideNotice()
      // Re-read for the content as stored (redaction may have changed it). Whether the rule still
      // exists is the save's own answer: a re-read that fails says nothing about that, and the
      // revision the save answered keeps the next save from being refused as stale.
      const current = saved.exists
        ? await latest().catch(() => null) ?? { name: rule.name, content, revision: saved.revision }
        : null
      base = current ?? { name: rule.name, content: '', revision: '' }
      if (!current) {
        cards.delete(rule.name)
        el.remove()
        empty.hidden = cards.size > 0
        ctx.ui.toast(`Rule "${rule.name}" deleted`)
      } else {
        textarea.value = current.content
        ctx.ui.toast(`Rule "${rule.name}" saved`)
      }
      setStatus('clean')
      if (current) keepFocus(pressed, textarea)
      renderWhen()
      load() // the budget note follows what is saved now, live stream or not
    }
    function onKey(event) {
      if ((event.metaKey || event.ctrlKey) && event.key.toLowerCase() === 's') {
        event.preventDefault()
        save()
      } else if (event.key === 'Escape' && status === 'dirty' && !event.isComposing) {
        event.preventDefault() // else this very key press cancels the dialog it opens
        confirmRevert()
      }
    }
    // Esc is pressed for many reasons (closing a menu, out of habit, cancelling an input method),
    // and reverting resets the textarea's undo history: a whole draft is never dropped unasked.
    async function confirmRevert() {
      const ok = await ctx.ui.confirm({
        title: `Discard your changes to "${rule.name}"?`,
        body: 'The editor goes back to the saved rule; your unsaved text is lost.',
        confirm: 'Discard my changes', danger: true,
      })
      if (ok && status === 'dirty') revert()
      textarea.focus()
    }

    setStatus('clean')
    renderWhen()
    card.textarea = textarea
    return card
  }

  async function onAdd(event) {
    event.preventDefault()
    const name = slugify(nameInput.value)
    if (!NAME_PATTERN.test(name)) {
      ctx.ui.toast('A rule name is lowercase letters, digits, - and _ (up to 64)', 'error')
      return
    }
    if (cards.has(name)) {
      cards.get(name).textarea.focus()
      return
    }
    try {
      await ctx.call('memory::rule::set', { bank, name, content: `# ${name}\n`, expected_revision: '' }, { quiet: true })
    } catch (err) {
      const exists = err.code === 'conflict'
      ctx.ui.toast(exists ? `Rule "${name}" already exists` : `${err.code}: ${err.message}`, 'error')
      // Not made (a restarting server, a refusal): the name stays to try again, as the bank
      // create's does; one that exists already is opened below instead.
      if (!exists) return
    }
    nameInput.value = ''
    await load()
    const card = cards.get(name)
    if (card) {
      card.textarea.focus()
      card.textarea.setSelectionRange(card.textarea.value.length, card.textarea.value.length)
    }
  }

  return {
    el,
    setBank(name) {
      bank = name
      loaded = null
      cards.clear()
      list.replaceChildren()
      loadNote.hidden = true // said of the bank shown before
      load()
    },
    changed({ rules }) {
      if (rules.has(bank)) load()
    },
    resync: load,
    // Re-read when the tab is opened: the budget note depends on `max_rule_chars`, which the
    // Settings tab (or the file) changes without any rule event; it named rules "cut" for good.
    shown: load,
    dirty: () => [...cards.values()].some((c) => c.dirty()),
  }
}

// Marking a memory as superseded by another (memory::supersede): the person finds the memory that
// replaces it (the bank's newest, or a search by words), may say why and ask for a merge, and
// confirms once more with both texts on screen. The call carries the revisions both were shown
// at, so a change landing while the dialog is open is refused as stale, never retired blind.

import { h } from './dom.js'

const CHOICES = 20 // candidates shown at once: a search narrows, it is no browsing list

/** Open the supersede dialog for `memory` (live, not pinned) of `bank`. Resolves to the call's
 * answer once done, or null when the person cancelled. A refusal is said in the dialog. */
export function openSupersede(ctx, bank, memory) {
  const search = h('input', { type: 'search', class: 'mw-input', attrs: { 'aria-label': 'Find the memory that replaces it', autocomplete: 'off', dir: 'auto' }, placeholder: 'Search by words (empty: the newest)' })
  const choices = h('div', { class: 'mw-supersede-choices', attrs: { role: 'radiogroup', 'aria-label': 'The memory that replaces it' } })
  const reason = h('input', { class: 'mw-input', attrs: { 'aria-label': 'Reason (optional)', autocomplete: 'off', dir: 'auto', maxlength: '500' } })
  const merge = h('input', { type: 'checkbox' })
  const status = h('p', { class: 'mw-rail-status', attrs: { role: 'alert' } })
  const ok = h('button', { type: 'submit', class: 'mw-btn mw-primary', text: 'Supersede…', disabled: true })
  const cancel = h('button', { type: 'button', class: 'mw-btn', text: 'Cancel' })
  const form = h('form', { method: 'dialog' },
    h('h2', { class: 'mw-dialog-title', text: 'Mark this memory as superseded' }),
    h('p', { class: 'mw-supersede-target', dir: 'auto', text: memory.text }),
    h('p', { class: 'mw-muted', text: 'It leaves recall; the record stays on disk and in its history, pointing to the memory that replaces it.' }),
    h('label', { class: 'mw-field' }, h('span', { text: 'Replaced by' }), search),
    choices,
    h('label', { class: 'mw-field' }, h('span', { text: 'Reason (optional)' }), reason),
    h('label', { class: 'mw-check' }, merge, h('span', { text: 'merge: the replacement absorbs its observations (seen count)' })),
    status,
    h('div', { class: 'mw-dialog-actions' }, cancel, ok))
  const dialog = h('dialog', { class: 'mw-dialog', attrs: { 'aria-label': 'Mark this memory as superseded' } }, form)
  let shown = [] // the candidates on screen, as read
  let asked = 0 // the latest search: an older answer landing late is dropped

  const picked = () => shown.find((m) => m.id === choices.querySelector('input:checked')?.value) ?? null

  async function load() {
    const mine = ++asked
    const query = search.value.trim()
    let found
    try {
      found = query
        ? (await ctx.call('memory::recall', { bank, query, limit: CHOICES + 1, mode: 'lexical' }, { quiet: true })).memories.map((hit) => hit.memory)
        : (await ctx.call('memory::list', { bank, limit: CHOICES + 1, offset: 0 }, { quiet: true })).memories
    } catch (err) {
      if (mine === asked) status.textContent = `${err.code}: ${err.message}`
      return
    }
    if (mine !== asked) return
    status.textContent = ''
    shown = found.filter((m) => m.id !== memory.id && (m.invalid_at === undefined || m.invalid_at === null)).slice(0, CHOICES)
    choices.replaceChildren(...(shown.length ? shown.map((m) => h('label', { class: 'mw-check mw-supersede-choice' },
      h('input', { type: 'radio', name: 'mw-supersede-winner', value: m.id }),
      h('span', { dir: 'auto', text: m.text }))) : [h('p', { class: 'mw-muted', text: query ? 'No other memory matches.' : 'No other memory in this bank.' })]))
    ok.disabled = true
  }

  let debounce = null
  search.addEventListener('input', () => { clearTimeout(debounce); debounce = setTimeout(load, 250) })
  choices.addEventListener('change', () => { ok.disabled = picked() === null })

  return new Promise((resolve) => {
    let answer = null
    form.addEventListener('submit', async (event) => {
      event.preventDefault()
      const winner = picked()
      if (!winner) return
      const confirmed = await ctx.ui.confirm({
        title: 'Supersede this memory?',
        body: [memory.text, 'will be retired, replaced by:', winner.text,
          merge.checked ? 'The replacement absorbs its observations.' : 'The replacement is left as it is.'],
        confirm: 'Supersede', danger: true,
      })
      if (!confirmed) return
      const payload = {
        bank, id: memory.id, superseded_by: winner.id,
        expected_revision: memory.revision ?? 0, expected_winner_revision: winner.revision ?? 0,
        reinforce: merge.checked,
      }
      if (reason.value.trim()) payload.reason = reason.value.trim()
      try {
        answer = await ctx.call('memory::supersede', payload, { quiet: true })
        dialog.close()
      } catch (err) {
        status.textContent = err.code === 'conflict'
          ? `Not done: ${err.message}. One of them changed since it was shown; close and try again on what is there now.`
          : `Not done: ${err.code}: ${err.message}`
      }
    })
    cancel.addEventListener('click', () => dialog.close())
    dialog.addEventListener('close', () => { clearTimeout(debounce); asked += 1; dialog.remove(); resolve(answer) })
    ctx.ui.root.append(dialog)
    dialog.showModal()
    search.focus()
    load()
  })
}

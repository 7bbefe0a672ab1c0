// The bank rail: every bank with its counts, a create box, and delete (to the trash) with a
// confirmation that says exactly what moves.

import { h, reconcile, setText } from './dom.js'
import { NAME_PATTERN, plural, slugify, typedName } from './format.js'

export function createBankRail(ctx, { select, created, removing, removed }) {
  const list = h('ul', { class: 'mw-bank-list', attrs: { 'aria-label': 'Banks' } })
  const status = h('p', { class: 'mw-rail-status' })
  const input = h('input', {
    class: 'mw-input', placeholder: 'new-bank', maxLength: 64,
    attrs: { 'aria-label': 'New bank name', autocomplete: 'off', spellcheck: 'false' },
    on: { input: () => { input.value = typedName(input.value) } },
  })
  const form = h('form', { class: 'mw-bank-create', on: { submit: onCreate } },
    input, h('button', { type: 'submit', class: 'mw-btn', text: 'Create' }))
  const el = h('nav', { class: 'mw-rail', attrs: { 'aria-label': 'Memory banks' } },
    h('h2', { class: 'mw-rail-title', text: 'Banks' }), list, status, form)

  let selected = null
  let banks = []
  // The last list call's refusal, until one is answered: a selection redraws the rail, and wrote
  // "No banks yet" (or nothing) over it, which read as an empty data dir.
  let failure = null

  async function onCreate(event) {
    event.preventDefault()
    const name = slugify(input.value)
    if (!NAME_PATTERN.test(name)) {
      ctx.ui.toast('A bank name is lowercase letters, digits, - and _ (up to 64)', 'error')
      return
    }
    let result
    try {
      result = await ctx.call('memory::bank::create', { name })
    } catch {
      return // the toast said why; the name stays (a throw here was an uncaught error)
    }
    input.value = ''
    ctx.ui.toast(result.created ? `Created bank "${name}"` : `Bank "${name}" already exists`)
    created(name)
  }

  function row(bank) {
    const name = h('span', { class: 'mw-bank-label' })
    const counts = h('span', { class: 'mw-bank-meta' })
    const button = h('button', { type: 'button', class: 'mw-bank-button', on: { click: () => select(bank.name) } }, name, counts)
    const item = h('li', { class: 'mw-bank-item' }, button)
    update(item, bank)
    return item
  }

  function update(item, bank) {
    const button = item.firstElementChild
    const [name, counts] = button.children
    setText(name, bank.name)
    button.title = bank.description ?? '' // the whole description, on hover: the rail is narrow
    // Sharing intent and what agents may do with the bank (C22), when they are not the usual.
    const access = bank.settings?.conscious_access
    const extra = [
      bank.settings?.scope === 'shared' ? 'shared' : '',
      access && access !== 'read_write' ? `agents: ${access === 'none' ? 'no tools' : 'read only'}` : '',
    ].filter(Boolean).map((part) => ` · ${part}`).join('')
    setText(counts, `${plural(bank.memories, 'memory', 'memories')} · ${bank.pinned} pinned · ${plural(bank.rules, 'rule')}${extra}`)
    const current = bank.name === selected
    button.classList.toggle('mw-selected', current)
    if (current) button.setAttribute('aria-current', 'true')
    else button.removeAttribute('aria-current')
  }

  function render(next, current) {
    banks = next
    failure = null
    if (current !== undefined) selected = current // null: no bank is shown (one is being deleted)
    draw()
  }

  function draw() {
    reconcile(list, banks, (b) => b.name, row, update)
    setText(status, failure ? `Could not list banks: ${failure.code}: ${failure.message}`
      : banks.length ? '' : 'No banks yet: the default bank appears with its first memory.')
  }

  async function remove(name) {
    const bank = banks.find((b) => b.name === name)
    if (!bank) return
    const ok = await ctx.ui.confirm({
      title: `Move bank "${name}" to the trash?`,
      body: [
        `${plural(bank.memories, 'memory', 'memories')} and ${plural(bank.rules, 'rule')} leave every session that uses this bank.`,
        'The folder moves to .trash/ in the data dir: recoverable by hand, not from here.',
      ],
      confirm: 'Move to trash',
      danger: true,
    })
    if (!ok) return
    // Said before the call goes out: the workspace stops asking about this bank now, so neither
    // a refresh set off by its own "trashed" event (which may arrive before this call's answer)
    // nor a poll asks the server for a bank that is gone.
    removing(name)
    let result
    try {
      result = await ctx.call('memory::bank::delete', { name })
    } catch {
      removed(name, false) // refused: the toast says why, the bank is shown again
      return
    }
    ctx.ui.toast(`Bank "${name}" moved to ${result.trashed_to}`)
    removed(name, true)
  }

  return {
    el,
    render,
    remove,
    setSelected(name) {
      selected = name
      draw()
    },
    failed(err) {
      failure = err
      draw()
    },
  }
}

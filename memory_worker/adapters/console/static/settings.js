// The settings panel: every configuration field with its description, default and effective
// value. Editable where the home allows it (standalone with a --config file); otherwise it says
// where the settings live and how to change them.

import { h, fill, keepFocus, setText } from './dom.js'

// Why a field the server keeps from the console is not editable here (settings_view.py's
// NOT_FROM_CONSOLE), each in its own words.
const LOCKED = {
  data_dir: 'it moves the whole store (edit the file or pass --data-dir).',
  allowed_hosts: 'it decides who may reach this server at all (edit the settings file).',
}

export function createSettingsPanel(ctx) {
  const banner = h('p', { class: 'mw-banner' })
  const form = h('form', { class: 'mw-settings', on: { submit: onSubmit } })
  const saveButton = h('button', { type: 'submit', class: 'mw-btn mw-primary', text: 'Save settings', disabled: true })
  const message = h('p', { class: 'mw-notice', hidden: true, attrs: { role: 'alert' } })
  // Shown when a save was refused because the settings changed since this panel read them: the
  // current values replace the form's (the person's edits are dropped, on their word).
  const reload = h('button', { type: 'button', class: 'mw-btn', text: 'Reload settings', hidden: true, on: { click: () => load({ force: true }) } })
  const el = h('div', {}, banner, form)
  let view = null
  let inputs = new Map()

  // Only the latest read is shown (an older answer landing last would show older values), and
  // never over what the person started typing meanwhile.
  let asked = 0
  async function load({ force = false } = {}) {
    const seq = ++asked
    let fresh
    try {
      fresh = await ctx.transport.settings()
    } catch (err) {
      if (seq === asked) setText(banner, `Settings unavailable: ${err.code ?? 'error'}: ${err.message ?? err}`)
      return
    }
    if (seq !== asked || (!force && view && changes().size > 0)) return
    view = fresh
    render()
    if (force) { message.hidden = true; reload.hidden = true }
  }

  // The form is built once per shape (which fields, of which kinds) and refreshed in place after
  // that. Rebuilt at every read (the panel opened again, a live resync), it took the field the
  // person had just clicked into out of the page, and the focus with it: what they typed next
  // went nowhere (and Playwright's fill, which focuses first and types after, lost its text when
  // the live resync's read landed in between).
  let shape = ''
  function render() {
    banner.dataset.editable = String(view.editable)
    setText(banner, view.reason)
    const next = JSON.stringify([view.editable, view.fields.map((f) => [f.name, f.type, f.enum ?? null])])
    if (next !== shape) build()
    shape = next
    for (const field of view.fields) refresh(inputs.get(field.name), field)
    saveButton.disabled = true
  }

  function build() {
    inputs = new Map()
    const rows = view.fields.map((field) => {
      const id = `mw-setting-${field.name}`
      let input
      if (field.type === 'boolean') {
        input = h('input', { type: 'checkbox', id })
      } else if (Array.isArray(field.enum)) {
        // One of a few words: offered, not guessed (the prompt versions were named nowhere).
        input = h('select', { id, class: 'mw-input' }, field.enum.map((choice) => h('option', { value: String(choice), text: String(choice) })))
      } else if (field.type === 'integer' || field.type === 'number') {
        input = h('input', { type: 'number', id, class: 'mw-input', step: field.type === 'integer' ? '1' : 'any' })
      } else {
        input = h('input', { type: 'text', id, class: 'mw-input', attrs: { spellcheck: 'false' } })
      }
      input.addEventListener('input', () => { saveButton.disabled = changes().size === 0 })
      input.addEventListener('change', () => { saveButton.disabled = changes().size === 0 })
      const help = h('p', { class: 'mw-setting-help' })
      inputs.set(field.name, { input, field, help })
      return h('div', { class: 'mw-setting', dataset: { name: field.name } },
        h('label', { class: 'mw-setting-name mw-mono', attrs: { for: id }, text: field.name }),
        h('div', { class: 'mw-setting-input' }, input),
        help)
    })
    form.replaceChildren(...rows, message, view.editable ? h('div', { class: 'mw-card-actions' }, reload, saveButton) : null)
  }

  /** Show `field` (as just read) in its row, the elements kept: the focus stays where it is. */
  function refresh(entry, field) {
    const { input, help } = entry
    entry.field = field
    if (field.type === 'boolean') input.checked = Boolean(field.value)
    else {
      const value = input.type === 'number' ? String(field.value) : String(field.value ?? '')
      if (input.value !== value) input.value = value // the same value is not set again: the caret stays
    }
    if (input.type === 'number') {
      for (const [name, bound] of [['min', field.minimum ?? field.exclusiveMinimum], ['max', field.maximum]]) {
        if (bound === undefined || bound === null) input.removeAttribute(name)
        else input.setAttribute(name, String(bound))
      }
    }
    input.disabled = !field.editable
    const note = !field.editable && view.editable ? `Not editable here: ${LOCKED[field.name] ?? 'edit the settings file.'}` : null
    fill(help, field.description,
      h('span', { class: 'mw-muted', text: ` Default: ${JSON.stringify(field.default)}.` }),
      note ? h('span', { class: 'mw-muted', text: ` ${note}` }) : null)
  }

  function valueOf({ input, field }) {
    if (field.type === 'boolean') return input.checked
    // `Number`, not `parseInt`: the box takes `1e4` (10000), which `parseInt` read as 1 and saved.
    // A fraction in an integer field is the browser's to refuse (step 1), then the worker's.
    if (field.type === 'integer' || field.type === 'number') return input.value === '' ? NaN : Number(input.value)
    return input.value
  }

  function changes() {
    const changed = new Map()
    for (const [name, entry] of inputs) {
      if (!entry.field.editable) continue
      const value = valueOf(entry)
      if (value !== entry.field.value) changed.set(name, value)
    }
    return changed
  }

  async function onSubmit(event) {
    event.preventDefault()
    const values = Object.fromEntries(changes())
    if (!Object.keys(values).length) return
    const pressed = el.ownerDocument.activeElement
    try {
      view = await ctx.transport.saveSettings(values, view.revision)
    } catch (err) {
      message.hidden = false
      const stale = err.code === 'conflict'
      setText(message, stale
        ? 'Not saved: the settings changed elsewhere (another tab, the CLI or a hand edit) since this panel read them. Reload them to see what is in effect now, then make your change again.'
        : `Not saved: ${err.code}: ${err.message}`)
      reload.hidden = !stale
      return
    }
    message.hidden = true // an earlier refusal no longer stands: saying "Not saved" now is wrong
    reload.hidden = true
    render()
    // "Save settings" is disabled again once saved: the focus on it goes to the first field saved.
    const first = inputs.get(Object.keys(values)[0])?.input
    if (first) keepFocus(pressed, first)
    ctx.ui.toast(`Saved ${Object.keys(values).join(', ')}`)
  }

  let loadedOnce = false
  return {
    el,
    // Read again each time the panel is opened: no event says a setting changed (another tab, a
    // hand edit of the file, the CLI), and a panel read once showed the old values for good,
    // where a setting could not even be set back to the value it showed (the form saw no change).
    shown() { if (!loadedOnce || changes().size === 0) { loadedOnce = true; load() } },
    resync() { if (loadedOnce && changes().size === 0) load() },
    dirty: () => changes().size > 0,
  }
}

// A bank's settings (description, subject scoping, capacity, retention, recall blend, access, scope): shown as
// they are in effect and changed through memory::bank::configure, which checks them whole; only the
// fields edited are sent, so a field left alone keeps following the configured default. A field
// emptied (or "configured default" picked) is sent as null, which returns it to that default: read
// as a number, an empty box was 0 (a threshold or weight set to 0 for good, three weights refused).

import { h } from './dom.js'

const CATEGORIES = ['fact', 'preference', 'procedure', 'context', 'correction']
const DEFAULT = '' // a select's "configured default" option
const LANES = ['content', 'context', 'intention']

/** A box's number, or null (the configured default) when it was emptied. */
function numberOrDefault(input, parse) {
  return input.value.trim() === '' ? null : parse(input.value)
}

function retentionText(retention) {
  return Object.entries(retention ?? {}).map(([k, v]) => `${k}=${v}`).join(', ')
}

/** A typed whole number as the worker is to judge it: `parseInt` read `1e3` as 1 and
 * `30 days` or `7.5` as 30 and 7, saving a value nobody gave. NaN (sent as null) for no number,
 * which the worker refuses with its own words. */
function typedNumber(text) {
  const trimmed = String(text ?? '').trim()
  return trimmed === '' ? NaN : Number(trimmed)
}

function parseRetention(text) {
  const out = {}
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const [key, days] = part.split('=').map((p) => p.trim())
    out[key] = typedNumber(days)
  }
  return out
}

/** Open the settings dialog of `bank` (a `BankInfo` with `settings`); resolves when closed. */
export function openBankSettings(ctx, bank) {
  const s = bank.settings ?? {}
  const weights = s.association_weights ?? {}
  const field = (label, input) => h('label', { class: 'mw-field' }, h('span', { text: label }), input)
  const number = (value, step) => h('input', { type: 'number', class: 'mw-input', value: String(value ?? ''), attrs: { step, min: '0' } })
  const select = (value, options) => {
    const el = h('select', { class: 'mw-input' }, ...options.map((o) => h('option', { value: o, text: o })),
      h('option', { value: DEFAULT, text: 'configured default' }))
    el.value = value
    return el
  }
  const scoping = h('input', { type: 'checkbox' })
  scoping.checked = Boolean(s.subject_scoping)
  const inputs = {
    description: h('input', { class: 'mw-input', value: bank.description ?? '', attrs: { dir: 'auto', autocomplete: 'off' } }),
    subject_scoping: scoping,
    max_memories: number(s.max_memories, '1'),
    max_per_subject: number(s.max_per_subject, '1'),
    retention: h('input', { class: 'mw-input', value: retentionText(s.retention), placeholder: 'context=30, preference=365', attrs: { 'aria-label': 'Retention days per category' } }),
    relevance_threshold: number(s.relevance_threshold, 'any'),
    conscious_access: select(s.conscious_access ?? 'read_write', ['none', 'read', 'read_write']),
    scope: select(s.scope ?? 'private', ['private', 'shared']),
    content: number(weights.content, 'any'),
    context: number(weights.context, 'any'),
    intention: number(weights.intention, 'any'),
  }
  // The three weights are one setting: all emptied is its default; some emptied has none (the
  // model's 1/0/0 is not the configured blend), which `weightsGap` says before anything is sent.
  const weightsRead = () => {
    const values = LANES.map((lane) => numberOrDefault(inputs[lane], Number))
    return values.every((v) => v === null) ? null : Object.fromEntries(LANES.map((lane, i) => [lane, values[i]]))
  }
  const weightsGap = () => {
    const emptied = LANES.filter((lane) => inputs[lane].value.trim() === '').length
    return emptied > 0 && emptied < LANES.length
  }
  const read = () => ({
    description: inputs.description.value,
    subject_scoping: inputs.subject_scoping.checked,
    max_memories: numberOrDefault(inputs.max_memories, typedNumber),
    max_per_subject: numberOrDefault(inputs.max_per_subject, typedNumber),
    retention: inputs.retention.value.trim() === '' ? null : parseRetention(inputs.retention.value),
    relevance_threshold: numberOrDefault(inputs.relevance_threshold, Number),
    conscious_access: inputs.conscious_access.value === DEFAULT ? null : inputs.conscious_access.value,
    scope: inputs.scope.value === DEFAULT ? null : inputs.scope.value,
    association_weights: weightsRead(),
  })
  const initial = JSON.stringify(read())
  const before = read()
  const status = h('p', { class: 'mw-rail-status' })
  const ok = h('button', { type: 'submit', class: 'mw-btn mw-primary', text: 'Save settings' })
  const cancel = h('button', { type: 'button', class: 'mw-btn', text: 'Close' })
  // Shown when the save was refused because the settings changed since this dialog read them
  // (another tab, the CLI, a hand edit of bank.yaml): it opens the dialog again on what is there.
  const reload = h('button', { type: 'button', class: 'mw-btn', text: 'Reload settings', hidden: true })
  let reopen = null
  const form = h('form', { method: 'dialog' },
    h('h2', { class: 'mw-dialog-title', text: `Settings of bank "${bank.name}"` }),
    h('p', { class: 'mw-muted', text: 'Shown as in effect. Empty a box, or pick "configured default", to have the bank follow the server\'s configured default again.' }),
    field('description', inputs.description),
    h('label', { class: 'mw-check' }, scoping, h('span', { text: 'subject scoping: a person only ever sees general memories and their own' })),
    field('max memories (0 = unlimited)', inputs.max_memories),
    field('max per subject (0 = unlimited)', inputs.max_per_subject),
    field(`retention days per category (${CATEGORIES.join(', ')})`, inputs.retention),
    field('relevance threshold (0 to 1)', inputs.relevance_threshold),
    field('weights: content', inputs.content), field('weights: context', inputs.context), field('weights: intention', inputs.intention),
    field('conscious access', inputs.conscious_access),
    field('scope', inputs.scope),
    status,
    h('div', { class: 'mw-dialog-actions' }, cancel, reload, ok))
  const dialog = h('dialog', { class: 'mw-dialog', attrs: { 'aria-label': `Settings of bank ${bank.name}` } }, form)
  return new Promise((resolve) => {
    form.addEventListener('submit', async (event) => {
      event.preventDefault()
      const now = read()
      if (JSON.stringify(now) === initial) { dialog.close(); return }
      if (weightsGap()) {
        status.textContent = 'Give all three weights, or empty all three for the configured blend.'
        return
      }
      // Applied only if the bank still has what this dialog was opened on: a save made from a
      // stale read is refused (`conflict`) rather than overwriting a change it never showed.
      const changes = { name: bank.name }
      if (bank.settings_revision) changes.expected_settings_revision = bank.settings_revision
      for (const [key, value] of Object.entries(now)) {
        if (JSON.stringify(value) !== JSON.stringify(before[key])) changes[key] = value
      }
      try {
        const result = await ctx.call('memory::bank::configure', changes, { quiet: true })
        ctx.ui.toast(result.changed.length ? `Changed ${result.changed.join(', ')}` : 'Nothing changed')
        dialog.close()
      } catch (err) {
        if (err.code === 'conflict' && changes.expected_settings_revision) {
          status.textContent = 'Not saved: these settings were changed elsewhere (another tab, the CLI or a hand edit) since this dialog opened. Reload them to see what is there now, then make your change again.'
          reload.hidden = false
          return
        }
        status.textContent = `${err.code}: ${err.message}`
      }
    })
    reload.addEventListener('click', async () => {
      const answer = await ctx.call('memory::bank::get', { name: bank.name }).catch(() => null) // the toast says why
      if (!answer) return
      reopen = answer.bank
      dialog.close()
    })
    cancel.addEventListener('click', () => dialog.close())
    dialog.addEventListener('close', () => {
      dialog.remove()
      resolve(reopen ? openBankSettings(ctx, reopen) : undefined)
    })
    ctx.ui.root.append(dialog)
    dialog.showModal()
    cancel.focus()
  })
}

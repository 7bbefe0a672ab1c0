// The preview panel: what a turn on this bank would get for a message — the system-prompt
// section (rules), the memories handed to the turn in order with their scores (ambient ones, added
// by the floor with score 0, marked), and the appended message verbatim. It runs the pre-generate
// hook's own code (memory::preview).

import { h } from './dom.js'
import { plural, score as formatScore } from './format.js'

export function createPreviewPanel(ctx) {
  let bank = null
  let last = null
  const query = h('input', {
    class: 'mw-input', placeholder: 'What someone would type in chat, e.g. "draft this week\'s post"',
    attrs: { 'aria-label': 'Message to preview', autocomplete: 'off' },
  })
  const form = h('form', { class: 'mw-inline-form mw-preview-form', on: { submit: (e) => { e.preventDefault(); run() } } },
    query, h('button', { type: 'submit', class: 'mw-btn mw-primary', text: 'Preview' }))
  const suggestions = h('div', { class: 'mw-chips', attrs: { 'aria-label': 'Suggested messages' } })
  const result = h('div', { class: 'mw-preview-result', attrs: { 'aria-live': 'polite' } })
  const el = h('div', { class: 'mw-preview' },
    h('p', { class: 'mw-hint', text: 'What a new turn on this bank would be handed for a message, computed by the hook\'s own code.' }),
    form, suggestions, result)

  let suggested = 0 // only the latest ask is shown: an older answer may hold an erased name
  async function suggest() {
    const current = bank
    if (!current) return // no bank shown (one is being deleted)
    const seq = ++suggested
    const picks = []
    try {
      const { tags } = await ctx.call('memory::tags', { bank: current }, { quiet: true })
      picks.push(...tags.slice(0, 2).map((t) => `what about ${t.tag}?`))
      const { memories } = await ctx.call('memory::list', { bank: current, limit: 50 }, { quiet: true })
      const entities = [...new Set(memories.flatMap((m) => m.entities ?? []))].filter((e) => e !== 'user')
      picks.push(...entities.slice(0, 2).map((e) => `tell me about ${e}`))
    } catch { /* suggestions are a convenience */ }
    picks.push('who is the user?')
    if (current !== bank || seq !== suggested) return
    suggestions.replaceChildren(...picks.map((text) => h('button', {
      type: 'button', class: 'mw-chip', text,
      on: { click: () => { query.value = text; run() } },
    })))
  }

  // A run set off by a live change can overlap the person's own: only the latest one asked for
  // is shown (an older answer landing last would show a stale turn), and never for another bank.
  // A re-run (live change, poll) passes the message it repeats: the box may already hold the
  // person's next one, half typed, which is theirs and left alone.
  let runs = 0
  async function run(text = query.value.trim()) {
    if (!text) { query.focus(); return }
    const current = bank
    if (!current) return
    const seq = ++runs
    let preview
    try {
      preview = await ctx.call('memory::preview', { bank: current, query: text }, { quiet: true })
    } catch (err) {
      if (seq !== runs || current !== bank) return
      result.replaceChildren(h('p', { class: 'mw-notice', text: `Preview failed: ${err.code}: ${err.message}` }))
      return
    }
    if (seq !== runs || current !== bank) return
    last = text
    render(preview)
  }

  function render(p) {
    const top = Math.max(0, ...p.memories.map((m) => m.score))
    const section = h('details', { class: 'mw-card mw-section' },
      h('summary', { text: `System prompt gets: ${plural(p.rules, 'rule')}${p.rules_truncated ? ' · over budget, truncated' : ''}` }),
      h('pre', { class: 'mw-pre', text: p.system_prompt_section || '(nothing: inject_rules is off or the bank has no rules)' }))
    const memories = p.memories.length
      ? h('ol', { class: 'mw-preview-memories' }, p.memories.map((m, i) => {
        const ambient = m.score === 0
        const fill = h('span', { class: 'mw-score-fill' })
        fill.style.width = `${ambient || top === 0 ? 0 : Math.max(4, (m.score / top) * 100)}%`
        return h('li', { class: ambient ? 'mw-preview-memory mw-ambient' : 'mw-preview-memory' },
          h('span', { class: 'mw-rank', text: `${i + 1}` }),
          h('p', { class: 'mw-memory-text', dir: 'auto', text: m.memory.text }),
          ambient
            ? h('span', { class: 'mw-badge mw-badge-ambient', text: 'ambient', title: 'Added by the ambient floor (top memories), not matched by the message' })
            : h('span', { class: 'mw-score', title: 'Recall score' }, h('span', { class: 'mw-score-bar' }, fill), h('span', { class: 'mw-score-text', text: formatScore(m.score) })))
      }))
      : h('p', { class: 'mw-empty', text: 'No memory would be appended to this turn.' })
    const message = h('details', { class: 'mw-card mw-section' },
      h('summary', { text: 'Appended message, verbatim' }),
      h('pre', { class: 'mw-pre', text: p.message ?? '(none: no memory fits the budget)' }))
    // A live re-run replaces the result: the sections the person opened stay open, and the one
    // the keyboard is on keeps the focus (it fell to <body> with the summary it was on).
    const before = [...result.querySelectorAll('details')]
    const opened = before.map((d) => d.open)
    const focused = before.findIndex((d) => d.querySelector('summary') === el.ownerDocument.activeElement)
    result.replaceChildren(
      h('p', { class: 'mw-summary', dataset: { retrieval: p.retrieval } }, `Retrieval ${p.retrieval} · ${plural(p.memories.length, 'memory', 'memories')} handed to the turn, in this order`),
      section,
      h('h3', { class: 'mw-subhead', text: 'Recalled memories' }),
      memories,
      message)
    result.querySelectorAll('details').forEach((d, i) => {
      d.open = opened[i] ?? false
      if (i === focused) d.querySelector('summary').focus({ preventScroll: true })
    })
  }

  return {
    el,
    setBank(name) {
      bank = name
      last = null
      result.replaceChildren()
      query.value = '' // an input's text is its value, not its textContent
      suggest()
    },
    changed({ items, rules }) {
      if ((items.has(bank) || rules.has(bank)) && last) run(last)
    },
    // Offered from the bank's entities, worked out when the bank opened: an erased person's
    // name ("tell me about Rui") stayed offered after `memory::forget-subject`.
    erased(banks) { if (banks.has(bank)) suggest() },
    resync() { if (last) run(last) },
    // Run again when the tab is opened: what a turn gets follows the settings (recall_limit, the
    // budgets, inject_*), which the Settings tab changes without any memory or rule event.
    shown() { if (last) run(last) },
  }
}

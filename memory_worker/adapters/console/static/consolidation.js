// The consolidation panel, read-only: what the memory-consolidate sibling last did to this bank,
// as its own `memory-consolidate::status` reports it (the schedule, and per bank the last pass:
// each group of duplicates, what was kept, what was retired into it or left for a person, and
// why). Nothing here writes; the sibling's reports are its own, and a console whose transport
// does not reach it (a standalone server does not host it) says so instead of showing nothing.

import { h, setAgo, setText } from './dom.js'
import { plural } from './format.js'

const STATUS = 'memory-consolidate::status'
// The answers of a transport that has no such function: the standalone server's unknown path,
// the bus's missing sibling.
const ABSENT = new Set(['not_found', 'function_not_found', 'http_404'])
const ACTION = {
  merged: 'merged',
  partial: 'partly merged',
  planned: 'would merge (dry run)',
  'report-only': 'left for a person',
  capped: 'postponed (run budget)',
  unchanged: 'not merged (errors)',
  skipped: 'skipped (pinned)',
}

export function createConsolidationPanel(ctx) {
  const refresh = h('button', { type: 'button', class: 'mw-btn', text: 'Refresh', on: { click: () => load() } })
  const schedule = h('p', { class: 'mw-consolidation-schedule', attrs: { 'aria-live': 'polite' } })
  const summary = h('p', { class: 'mw-consolidation-summary' })
  const errors = h('ul', { class: 'mw-consolidation-errors', hidden: true })
  const groups = h('ul', { class: 'mw-consolidation-groups' })
  const el = h('div', { class: 'mw-consolidation' },
    h('p', { class: 'mw-hint', text: 'What the memory-consolidate sibling did in its last pass over this bank: near-duplicates merged into one survivor (the retired ones stay in each memory\'s history), and groups left for a person to decide. Read-only; pinned memories are never touched.' }),
    h('div', { class: 'mw-card-actions' }, refresh, schedule), summary, errors, groups)
  // Read only while its tab is the one shown: a live burst elsewhere asks the sibling nothing.
  const visible = () => el.parentElement?.hidden === false
  let asked = 0 // the latest read: an answer for an earlier bank or read is dropped

  async function load() {
    const mine = ++asked
    const bank = ctx.bank()
    if (bank === null) return // no bank shown: nothing to ask about
    el.dataset.state = 'loading'
    let status
    try {
      status = await ctx.call(STATUS, {}, { quiet: true })
    } catch (err) {
      if (mine !== asked) return
      el.dataset.state = ABSENT.has(err.code) ? 'absent' : 'error'
      setText(schedule, ABSENT.has(err.code)
        ? 'No consolidation reports here: the memory-consolidate sibling does not answer this console. Under iii, install and start memory-consolidate; a standalone server does not host it (`memory-worker consolidate --dry-run` prints what a pass would do).'
        : `Could not read the consolidation status: ${err.code}: ${err.message}`)
      clear()
      return
    }
    if (mine !== asked || bank !== ctx.bank()) return
    el.dataset.state = 'shown'
    renderSchedule(status)
    // Its own key only: a bank named `constructor` (a valid name) read the object's inherited
    // function as its report, and showed a pass of nothing at no time.
    const banks = status.banks ?? {}
    renderReport(Object.hasOwn(banks, bank) ? banks[bank] : null)
  }

  function clear() {
    setText(summary, '')
    errors.replaceChildren()
    errors.hidden = true
    groups.replaceChildren()
  }

  function renderSchedule(status) {
    const parts = []
    if (status.inert) parts.push(`Scheduled passes are held: ${status.inert_reason ?? 'its configuration could not be read'}.`)
    else parts.push(status.enabled ? `Scheduled passes every ${status.interval_hours} h${status.dry_run ? ', planning only (dry run)' : ''}.` : 'Scheduled passes are off (manual runs still work).')
    if (status.running) parts.push('A pass is running now.')
    else if (status.due) parts.push('The next pass is due.')
    if (status.error) parts.push(`Its last run time could not be read: ${status.error}`)
    setText(schedule, parts.join(' '))
  }

  function renderReport(report) {
    clear()
    if (!report) {
      setText(summary, 'No consolidation pass has reported on this bank yet.')
      return
    }
    const when = h('time')
    setAgo(when, report.at)
    const counts = [
      `${plural(report.scanned ?? 0, 'memory', 'memories')} read`,
      `${plural(report.groups_found ?? 0, 'group')} found`,
      `${report.merged ?? 0} merged`,
      `${report.report_only ?? 0} left for a person`,
    ]
    if (report.skipped_pinned) counts.push(`${report.skipped_pinned} pinned left alone`)
    if (report.capped) counts.push(`${report.capped} postponed`)
    if (report.expired) counts.push(`${report.expired} expired first`)
    summary.replaceChildren(`Last pass ${report.dry_run ? '(dry run) ' : ''}`, when, `: ${counts.join(' · ')}.`,
      report.llm?.status && report.llm.status !== 'off' ? ` Judge: ${report.llm.status}${report.llm.detail ? ` (${report.llm.detail})` : ''}.` : '')
    const errs = report.errors ?? []
    errors.replaceChildren(...errs.map((e) => h('li', { class: 'mw-notice', text: e })))
    errors.hidden = errs.length === 0
    groups.replaceChildren(...(report.groups ?? []).map(group))
  }

  function group(g) {
    const merged = new Set(g.merged_ids ?? [])
    const pinned = new Set(g.skipped_pinned ?? [])
    const losers = (g.loser_ids ?? []).map((id, i) => h('li', { class: 'mw-consolidation-loser', dataset: { id } },
      h('span', { class: 'mw-badge', text: merged.has(id) ? 'retired into it' : pinned.has(id) ? 'pinned: kept' : 'not retired' }), ' ',
      h('span', { dir: 'auto', text: g.loser_texts?.[i] ?? id })))
    return h('li', { class: 'mw-consolidation-group', dataset: { action: g.action, tier: g.tier } },
      h('div', { class: 'mw-check-head' },
        h('span', { class: 'mw-badge', text: g.tier, title: 'Which rule grouped them' }),
        h('span', { class: 'mw-badge', text: ACTION[g.action] ?? g.action }),
        g.score !== undefined && g.score !== null ? h('span', { class: 'mw-muted', text: `similarity ≥ ${g.score.toFixed(2)}` }) : null),
      h('p', { class: 'mw-consolidation-why', text: `Why: ${g.why}` }),
      h('p', { class: 'mw-consolidation-winner' }, h('span', { class: 'mw-badge mw-badge-pin', text: 'kept' }), ' ',
        h('span', { dir: 'auto', text: g.winner_text })),
      h('ul', { class: 'mw-consolidation-losers' }, losers))
  }

  return {
    el,
    shown() { load() },
    setBank() { if (visible()) load() },
    // A pass announces every merge as an item change: the report it wrote is read again.
    changed({ items }) { if (visible() && items.has(ctx.bank())) load() },
    resync() { if (visible()) load() },
  }
}

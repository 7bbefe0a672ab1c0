// The doctor panel: memory::doctor's checks, each with what its failure degrades. Required checks
// decide `ok`; advisory ones (siblings, embeddings) say what works less well without them.

import { h, keepFocus, setText } from './dom.js'

// What each check protects, in a person's words (the worker's own detail says what it found).
const MEANING = {
  'data-dir-writable': 'Every save, edit and rule change is written here first. If this fails, nothing new can be remembered.',
  'store-roundtrip': 'A real save → recall → trash in a scratch bank. If this fails, saving or recall is broken right now.',
  'banks-loaded': 'A bank that cannot be loaded serves nothing (no rules, no memories) until its files are fixed; the other banks keep working.',
  'files-intact': 'Corrupt or torn lines found at load were skipped: those records are not served. The rest of the bank is.',
  'durability-warnings': 'A change landed but the disk did not confirm it: a power loss could still undo it.',
  'erasure-stamps': 'The record of when each person was erased could not be read: to keep erased people out, nothing said before it last changed is extracted, for anyone.',
  embeddings: 'Without an embedder recall is lexical only: a paraphrase that shares no word with a memory can be missed.',
  'router-reachable': 'Without llm-router nothing is extracted after turns (explicit saves still work) and recall has no semantic arm.',
  'session-manager-reachable': 'Without session-manager, session metadata cannot pick a bank and extraction cannot read transcripts.',
  'queue-reachable': 'Without a queue worker, extraction runs inline: a crash in the middle of a pass is not retried.',
  'configuration-reachable': 'Without the configuration worker, settings come from local defaults and do not hot-reload.',
  extraction: 'Nothing said in a conversation is remembered unless someone saves it explicitly (memory::save): no fact, preference or correction is captured after turns, and the learned rule does not grow.',
  'planted-links': 'A symbolic link inside the data dir is never followed: a bank behind one is not loaded, and a bank file that is one can be neither read nor written.',
  'capture-queue': 'Finished turns wait here to be extracted. While they wait, or once a job gives up, what was said in them is not remembered; a job that gave up keeps its messages in .capture.jsonl until an erasure.',
  'configuration-valid': 'The stored configuration holds values this version does not take as they are (an older worker wrote them): the worker runs on the nearest values it accepts until the entry is saved again.',
}

export function createDoctorPanel(ctx) {
  const run = h('button', { type: 'button', class: 'mw-btn mw-primary', text: 'Run checks', on: { click: () => check() } })
  const verdict = h('p', { class: 'mw-verdict', attrs: { 'aria-live': 'polite' } })
  const list = h('ul', { class: 'mw-checks' })
  const el = h('div', { class: 'mw-doctor' },
    h('p', { class: 'mw-hint', text: 'A self-test of this worker: its data dir, a real write and recall, what was damaged at load, and the workers around it. Running it creates and removes a scratch bank.' }),
    h('div', { class: 'mw-card-actions' }, run, verdict), list)
  let ran = false

  async function check() {
    // Disabled while running: pressed from the keyboard, the focus on it fell to <body>.
    const pressed = el.ownerDocument.activeElement === run ? run : null
    run.disabled = true
    setText(verdict, 'Running…')
    let report
    try {
      report = await ctx.call('memory::doctor', {}, { quiet: true })
    } catch (err) {
      setText(verdict, `Doctor failed to run: ${err.code}: ${err.message}`)
      verdict.dataset.ok = 'false'
      run.disabled = false
      keepFocus(pressed, run)
      return
    }
    run.disabled = false
    keepFocus(pressed, run)
    const failedRequired = report.checks.filter((c) => c.required && !c.ok).length
    const degraded = report.checks.filter((c) => !c.required && !c.ok).length
    verdict.dataset.ok = String(report.ok)
    setText(verdict, report.ok
      ? degraded ? `Working, with ${degraded} degradation(s) below` : 'Everything checks out'
      : `${failedRequired} required check(s) failing: memory is not working correctly`)
    list.replaceChildren(...report.checks.map((c) => h('li', {
      class: `mw-check-item ${c.ok ? 'mw-ok' : c.required ? 'mw-fail' : 'mw-warn'}`, dataset: { check: c.name },
    },
    h('div', { class: 'mw-check-head' },
      h('span', { class: 'mw-check-mark', text: c.ok ? '✓' : c.required ? '✗' : '!', attrs: { 'aria-label': c.ok ? 'passed' : 'failed' } }),
      h('span', { class: 'mw-mono mw-check-name', text: c.name }),
      h('span', { class: 'mw-badge', text: c.required ? 'required' : 'advisory' })),
    h('p', { class: 'mw-check-detail', text: c.detail }),
    MEANING[c.name] ? h('p', { class: 'mw-muted mw-check-meaning', text: `${c.ok ? 'Guards: ' : 'What this means: '}${MEANING[c.name]}` }) : null)))
  }

  return {
    el,
    shown() { if (!ran) { ran = true; check() } },
  }
}

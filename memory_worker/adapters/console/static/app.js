// The console page, home-independent: `mountConsole(root, {transport})` builds it inside `root`.
// The standalone server (main.js) and the iii console (page.js) differ only in their transport:
// how a function is called, how changes arrive, how settings are read and written.
//
// Layout: a header (title, live indicator, reload from disk), the bank rail, and the workspace
// with its tabs. Live changes refresh in place (keyed rows, fixed-size counters), so nothing the
// person is reading or editing jumps or loses its state.

import { h, setText, toast, confirmDialog, typing, retellTimes } from './dom.js'
import { errorParts, plural } from './format.js'
import { follow, ITEM_CHANGED, BANK_CHANGED } from './live.js'
import { createBankRail } from './banks.js'
import { openBankSettings } from './banksettings.js'
import { createRulesPanel } from './rules.js'
import { createMemoriesPanel } from './memories.js'
import { createPreviewPanel } from './preview.js'
import { createSettingsPanel } from './settings.js'
import { createDoctorPanel } from './doctor.js'
import { createConsolidationPanel } from './consolidation.js'

const TABS = [
  { id: 'rules', label: 'Rules', bank: true },
  { id: 'memories', label: 'Memories', bank: true },
  { id: 'preview', label: 'Preview', bank: true },
  { id: 'consolidation', label: 'Consolidation', bank: true },
  { id: 'settings', label: 'Settings', bank: false },
  { id: 'doctor', label: 'Doctor', bank: false },
]
const NARROW_PX = 800 // below this container width the rail and the workspace take turns
const MODE_TEXT = { connecting: 'connecting…', live: 'live', polling: 'polling', offline: 'offline' }
const MODE_TITLE = {
  connecting: 'Opening the live stream of changes…',
  live: 'Changes from every door (agents, CLI, REST, other tabs) appear as they happen.',
  polling: 'The live stream is not available; refreshing every 15 s (not while the tab is hidden).',
  offline: 'The memory server does not answer (stopped or restarting): what is shown may be out of date, and nothing can be saved. The page reconnects by itself.',
}

export function mountConsole(root, { transport, onDirty = () => {}, pollMs } = {}) {
  const standalone = transport.home === 'standalone'
  const state = { bank: null, tab: 'rules', banks: [], view: 'workspace' }
  const ui = { root, toast: (msg, kind) => toast(root, msg, kind), confirm: (opts) => confirmDialog(root, opts) }

  /** Call a worker function; failures become a toast unless the caller handles them. */
  const call = async (fn, payload, { quiet = false } = {}) => {
    let answer
    try {
      answer = await transport.call(fn, payload)
    } catch (err) {
      const parts = errorParts(err)
      // Only a call nothing answered is "offline": a refusal (a token refused, a 5xx) is the
      // server answering, and kept the header on "offline … reconnects by itself" for good.
      setReachable(parts.code !== 'offline')
      if (!quiet) ui.toast(`${fn}: ${parts.code}: ${parts.message}`, 'error')
      throw parts
    }
    setReachable(true)
    return answer
  }

  // --- header ----------------------------------------------------------------------------------
  const dot = h('span', { class: 'mw-dot', attrs: { 'aria-hidden': 'true' } })
  const modeText = h('span', { class: 'mw-mode-text', text: MODE_TEXT.connecting })
  const indicator = h('span', { class: 'mw-indicator', dataset: { mode: 'connecting' }, attrs: { role: 'status', title: MODE_TITLE.connecting } }, dot, modeText)
  // Off the live stream, "polling" said the page was kept true every 15 s while the server did
  // not answer at all (stopped, restarting): a call that finds no server says "offline" until
  // one is answered again, or the stream is back.
  let liveMode = 'connecting'
  let reachable = true
  function setReachable(value) {
    if (reachable === value) return
    reachable = value
    paintMode()
  }
  function paintMode() {
    const mode = liveMode !== 'live' && !reachable ? 'offline' : liveMode
    indicator.dataset.mode = mode
    indicator.title = MODE_TITLE[mode]
    setText(modeText, MODE_TEXT[mode])
  }
  const reloadButton = h('button', {
    type: 'button', class: 'mw-btn mw-ghost', text: 'Reload from disk',
    title: 'Re-read every bank from its files (after editing them by hand)',
    on: { click: async () => {
      const result = await call('memory::reload', {}).catch(() => null) // the toast says why
      if (!result) return
      ui.toast(`Reloaded ${result.banks} bank(s) from disk`)
      resync()
    } },
  })
  const header = h('header', { class: 'mw-header' },
    h('div', { class: 'mw-title' },
      h('h1', { text: 'Memory' }),
      h('p', { class: 'mw-subtitle', text: 'Banks of rules and memories, injected per turn' })),
    h('div', { class: 'mw-header-actions' }, indicator, reloadButton))

  // --- workspace -------------------------------------------------------------------------------
  const ctx = { call, ui, transport, bank: () => state.bank, banks: () => state.banks, changed: () => reportDirty() }
  const panels = {
    rules: createRulesPanel(ctx),
    memories: createMemoriesPanel(ctx),
    preview: createPreviewPanel(ctx),
    consolidation: createConsolidationPanel(ctx),
    settings: createSettingsPanel(ctx),
    doctor: createDoctorPanel(ctx),
  }
  const tabButtons = TABS.map((tab) => h('button', {
    type: 'button', class: 'mw-tab', text: tab.label, id: `mw-tab-${tab.id}`,
    attrs: { role: 'tab', 'aria-controls': `mw-panel-${tab.id}`, 'aria-selected': 'false', tabindex: '-1' },
    dataset: { tab: tab.id },
    on: { click: () => selectTab(tab.id), keydown: onTabKey },
  }))
  const tablist = h('div', { class: 'mw-tabs', attrs: { role: 'tablist', 'aria-label': 'Views' } }, tabButtons)
  const bankTitle = h('h2', { class: 'mw-bank-name' })
  const bankCounts = h('span', { class: 'mw-bank-counts' })
  // Seed 000: a bank's description is the "human description shown in listings and the console".
  const bankDescription = h('p', { class: 'mw-bank-description', dir: 'auto', hidden: true })
  const backButton = h('button', { type: 'button', class: 'mw-btn mw-ghost mw-back', text: '← Banks', on: { click: () => setView('banks') } })
  const deleteBank = h('button', {
    type: 'button', class: 'mw-btn mw-ghost mw-danger-text', text: 'Delete bank…',
    on: { click: () => rail.remove(state.bank) },
  })
  const bankSettings = h('button', {
    type: 'button', class: 'mw-btn mw-ghost', text: 'Settings…',
    on: { click: async () => {
      const answer = await ctx.call('memory::bank::get', { name: state.bank }).catch(() => null) // the toast says why
      if (!answer) return
      const { bank } = answer
      await openBankSettings(ctx, bank)
      refreshBanks()
    } },
  })
  const workspaceHeader = h('div', { class: 'mw-workspace-header' },
    backButton, h('div', { class: 'mw-bank-heading' }, bankTitle, bankCounts, bankDescription), bankSettings, deleteBank)
  const panelHosts = TABS.map((tab) => h('section', {
    class: 'mw-panel', id: `mw-panel-${tab.id}`, hidden: true,
    attrs: { role: 'tabpanel', 'aria-labelledby': `mw-tab-${tab.id}`, tabindex: '-1' },
  }, panels[tab.id].el))
  const workspace = h('main', { class: 'mw-workspace' }, workspaceHeader, tablist, panelHosts)

  const doc = root.ownerDocument
  let deleteFocused = false // "Delete bank…" was pressed from the keyboard: the focus comes back
  const rail = createBankRail(ctx, {
    select: (name) => selectBank(name),
    created: (name) => { refreshBanks().then(() => selectBank(name)) },
    removing: (name) => {
      deleteFocused = doc.activeElement === deleteBank
      if (state.bank === name) show(null)
    },
    removed: (name, done) => {
      refreshBanks().then(async () => {
        // Still on no bank (nobody picked one meanwhile): the first remaining one, as at start;
        // or, when the delete was refused, the bank again.
        if (state.bank === null) await selectBank(done ? firstBank() : name)
        // "Delete bank…" is disabled while no bank is shown: the focus on it fell to <body>, a
        // keyboard user sent back to the top. It goes to the bank now shown, in the rail (or to
        // the button again, the delete refused), else to the bank's selected tab.
        const lost = [doc.body, deleteBank, null].includes(doc.activeElement)
        if (!deleteFocused || !lost) return
        deleteFocused = false
        const shown = rail.el.querySelector('.mw-bank-button[aria-current="true"]')
        const tab = tabButtons.find((button) => button.getAttribute('aria-selected') === 'true')
        const target = [done ? shown : deleteBank, tab].find((el) => el && !el.disabled && el.offsetParent !== null)
        target?.focus()
      })
    },
  })

  const shell = h('div', { class: 'mw-shell' }, rail.el, workspace)
  root.classList.add('mw-root')
  root.replaceChildren(header, shell)

  // --- navigation ------------------------------------------------------------------------------
  function dirty() {
    return Object.values(panels).some((panel) => panel.dirty?.() || panel.unsaved?.())
  }
  /** Unsaved edits a bank switch would drop: the settings are the server's, not the bank's, and
   * stay as typed (counted, "Discard and switch" discarded nothing and asked at every switch). */
  function bankDirty() {
    return TABS.some((tab) => tab.bank && panels[tab.id].dirty?.())
  }
  function reportDirty() {
    onDirty(dirty())
  }

  async function selectBank(name, { fromHash = false } = {}) {
    if (name === state.bank) return setView('workspace')
    if (state.bank && bankDirty()) {
      const discard = await ui.confirm({
        title: 'Discard unsaved changes?',
        body: `You have unsaved edits in bank "${state.bank}". Switching banks discards them.`,
        confirm: 'Discard and switch', danger: true,
      })
      if (!discard) return
    }
    show(name)
    setView('workspace')
    if (!fromHash) writeHash()
  }

  /** Point the workspace at bank `name`; null: at none, so no panel asks the server anything. */
  function show(name) {
    state.bank = name
    for (const panel of Object.values(panels)) panel.setBank?.(name)
    reportDirty()
    rail.setSelected(name)
    renderBankHeading()
  }

  function firstBank() {
    return state.banks[0]?.name ?? 'main' // the default bank reads as empty until its first write
  }

  function selectTab(id, { focus = false, fromHash = false } = {}) {
    state.tab = id
    for (const button of tabButtons) {
      const selected = button.dataset.tab === id
      button.setAttribute('aria-selected', String(selected))
      button.tabIndex = selected ? 0 : -1
      if (selected && focus) button.focus()
    }
    for (const host of panelHosts) host.hidden = host.id !== `mw-panel-${id}`
    const tab = TABS.find((t) => t.id === id)
    workspace.dataset.scope = tab.bank ? 'bank' : 'global'
    panels[id].shown?.()
    if (!fromHash) writeHash()
  }

  function onTabKey(event) {
    const index = TABS.findIndex((t) => t.id === state.tab)
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key]
    if (step) {
      event.preventDefault()
      selectTab(TABS[(index + step + TABS.length) % TABS.length].id, { focus: true })
    } else if (event.key === 'Home' || event.key === 'End') {
      event.preventDefault()
      selectTab(TABS[event.key === 'Home' ? 0 : TABS.length - 1].id, { focus: true })
    }
  }

  function setView(view) {
    const active = root.ownerDocument.activeElement
    state.view = view
    root.dataset.view = view
    // A narrow window shows the bank list or the bank, not both: a key press that switched them
    // hid the button it was pressed on, the focus fell to <body>, and the next Tab after "← Banks"
    // left the page. It goes to the part now shown: the bank's tab, or the bank in the list.
    if (active && root.contains(active) && active.offsetParent === null) {
      const target = view === 'workspace'
        ? tabButtons.find((button) => button.getAttribute('aria-selected') === 'true')
        : rail.el.querySelector('.mw-bank-button[aria-current="true"]') ?? rail.el.querySelector('button, input')
      target?.focus()
    }
  }

  function renderBankHeading() {
    const info = state.banks.find((b) => b.name === state.bank)
    setText(bankTitle, state.bank || 'No bank')
    setText(bankCounts, info ? `${plural(info.memories, 'memory', 'memories')} · ${info.pinned} pinned · ${plural(info.rules, 'rule')}` : '')
    setText(bankDescription, info?.description ?? '')
    bankDescription.hidden = !info?.description
    deleteBank.disabled = !info
  }

  // Standalone only: the place in the page survives a reload (#/bank/<name>/<tab>). Under iii the
  // console owns the URL.
  function writeHash() {
    if (!standalone || !state.bank) return
    const hash = `#/bank/${encodeURIComponent(state.bank)}/${state.tab}`
    if (location.hash !== hash) history.replaceState(null, '', hash)
  }
  function readHash() {
    const match = standalone && /^#\/bank\/([^/]+)\/([a-z]+)$/.exec(location.hash)
    if (!match) return null
    try {
      return { bank: decodeURIComponent(match[1]), tab: match[2] }
    } catch {
      return null // a truncated or hand-typed link: not valid percent-encoding; start as with none
    }
  }

  // --- data ------------------------------------------------------------------------------------
  // One list call at a time; one asked for meanwhile runs again once that one is answered (its
  // answer may predate the change that asked), and the promise settles after the last run, so
  // `refreshBanks().then(…)` always sees what was there when it was called.
  let banksInFlight = null
  let banksAgain = false
  let banksListed = false // the last list call was answered: `state.banks` is what is there now
  const banksSeen = new Set() // every bank a list showed this tab: one of them missing is gone
  async function refreshBanks() {
    if (banksInFlight) { banksAgain = true; return banksInFlight }
    banksInFlight = (async () => {
      do {
        banksAgain = false
        try {
          const { banks } = await call('memory::bank::list', {}, { quiet: true })
          state.banks = banks
          banksListed = true
          for (const bank of banks) banksSeen.add(bank.name)
          rail.render(banks, state.bank)
          renderBankHeading()
        } catch (err) {
          banksListed = false
          rail.failed(err)
        }
      } while (banksAgain)
    })().finally(() => { banksInFlight = null })
    return banksInFlight
  }

  // Live events arrive in bursts (an import, a consolidation pass): coalesce them into one
  // refresh per animation frame per concern.
  let pending = null
  // `erased`: bank → ids `memory::forget-subject` destroyed, which leave the page before any refetch.
  const touched = { banks: false, items: new Set(), rules: new Set(), erased: new Map(), all: false }
  function schedule() {
    if (pending) return
    pending = setTimeout(flush, 120)
  }
  function flush() {
    pending = null
    const { all } = touched
    const items = new Set(touched.items)
    const rules = new Set(touched.rules)
    const erased = new Map(touched.erased)
    touched.all = false
    touched.banks = false
    touched.items.clear()
    touched.rules.clear()
    touched.erased.clear()
    const listed = refreshBanks()
    if (all) listed.then(leaveGoneBank)
    for (const panel of Object.values(panels)) {
      if (erased.size) panel.erased?.(erased) // first: whatever the refetch does, they go now
      if (all) panel.resync?.()
      else panel.changed?.({ items, rules })
    }
  }
  function onEvent({ type, payload }) {
    touched.banks = true
    if (type === ITEM_CHANGED && payload?.bank) touched.items.add(payload.bank)
    const id = payload?.id ?? payload?.memory?.id
    if (type === ITEM_CHANGED && payload?.event_type === 'erased' && payload.bank && typeof id === 'string') {
      if (!touched.erased.has(payload.bank)) touched.erased.set(payload.bank, new Set())
      touched.erased.get(payload.bank).add(id)
    }
    if (type === BANK_CHANGED && payload?.bank) {
      touched.rules.add(payload.bank)
      // Anything but a rules change (created, trashed, compacted) can change what is listed.
      if (payload.event_type !== 'rules-changed') touched.items.add(payload.bank)
      if (payload.event_type === 'trashed' && payload.bank === state.bank && !bankDirty()) {
        ui.toast(`Bank "${payload.bank}" was moved to the trash`)
        // On to a remaining bank, as after a delete made here: left on the bank that is gone,
        // every panel asked about it again, and its save boxes would have created it anew.
        // (Unsaved edits keep the page where it is: they are the person's to copy first.)
        show(null)
        refreshBanks().then(() => { if (state.bank === null) selectBank(firstBank()) })
      }
    }
    schedule()
  }
  function resync() {
    touched.all = true
    schedule()
  }
  /** After a resync: the bank shown is gone, and no "trashed" event said so (the tab was
   * reconnecting or polling, or the data dir was swapped for another): on to a remaining bank, as
   * when the event comes. Left on it, every panel asked about it again, and its save box and
   * "Add rule" would have created it anew. Unsaved edits keep the page where it is. */
  function leaveGoneBank() {
    const gone = state.bank
    if (!banksListed || gone === null || bankDirty()) return
    // Only a bank this tab saw listed: one never listed is opened on purpose (a link to a bank
    // before its first write, on a data dir with no bank yet), as at start.
    if (!banksSeen.has(gone) || state.banks.some((b) => b.name === gone) || gone === firstBank()) return
    ui.toast(`Bank "${gone}" is not there any more (deleted, or the data dir changed); showing "${firstBank()}"`)
    show(null)
    selectBank(firstBank())
  }

  const stopLive = follow(transport, {
    onEvent,
    onResync: resync,
    onMode: (mode) => {
      liveMode = mode
      if (mode === 'live') reachable = true
      paintMode()
    },
    pollMs,
  })

  // --- keyboard --------------------------------------------------------------------------------
  // Heard on the document, not on `root`: on a page just loaded nothing has focus and the key
  // goes to <body>, outside `root`. Keys aimed at the host around the page (the iii console's own
  // fields and controls) are left alone.
  function onKey(event) {
    const target = event.target
    const ours = root.contains(target) || target === doc.body || target === doc.documentElement
    // A dialog is asking something (a delete, a discard): the page behind it stays as it is.
    if (root.querySelector('dialog[open]')) return
    if (event.key === '/' && ours && !typing(event) && !event.ctrlKey && !event.metaKey && !event.altKey) {
      event.preventDefault()
      setView('workspace') // a narrow window on its bank list hides the workspace, search and all
      selectTab('memories')
      panels.memories.focusSearch()
    }
  }
  doc.addEventListener('keydown', onKey)

  // "just now", "3 hours ago": worked out again every minute, and when the person comes back to
  // the tab (a hidden tab's timers are slowed), not only when a change redraws the row.
  const retell = () => { if (!doc.hidden) retellTimes(root) }
  const clock = setInterval(retell, 60000)
  doc.addEventListener('visibilitychange', retell)
  const onBeforeUnload = (event) => {
    if (dirty()) { event.preventDefault(); event.returnValue = '' }
  }
  if (standalone) window.addEventListener('beforeunload', onBeforeUnload)
  // A bookmark or pasted link that differs only in its hash does not reload the page: follow it
  // (a refused switch, unsaved edits kept, puts the address back on what is shown).
  const onHashChange = async () => {
    const wanted = readHash()
    if (!wanted) return
    if (TABS.some((t) => t.id === wanted.tab) && wanted.tab !== state.tab) selectTab(wanted.tab, { fromHash: true })
    // Only a bank that is there, as at start: a link to one since moved to the trash opened it
    // (404s behind "does not exist", and its save boxes would have created it anew).
    await refreshBanks()
    if (wanted.bank !== state.bank && state.banks.length && !state.banks.some((b) => b.name === wanted.bank)) {
      ui.toast(`Bank "${wanted.bank}" does not exist (any more); staying on "${state.bank}"`, 'error')
    } else await selectBank(wanted.bank, { fromHash: true })
    writeHash()
  }
  if (standalone) window.addEventListener('hashchange', onHashChange)

  // Container width, not the viewport: under iii the page may sit in a narrow split pane.
  const resize = new ResizeObserver(([entry]) => {
    root.classList.toggle('mw-narrow', entry.contentRect.width < NARROW_PX)
  })
  resize.observe(root)

  // --- start -----------------------------------------------------------------------------------
  const start = readHash()
  setView(start ? 'workspace' : 'banks')
  selectTab(start && TABS.some((t) => t.id === start.tab) ? start.tab : 'rules', { fromHash: true })
  refreshBanks().then(() => {
    const names = state.banks.map((b) => b.name)
    const wanted = start?.bank
    const first = wanted && names.includes(wanted) ? wanted : names[0] ?? wanted ?? 'main'
    // A link to a bank that is not there (trashed, mistyped) lands on another: said, as when
    // the link is followed in an open tab, or the person reads (and saves into) it as theirs.
    // The address then names the bank shown, not the one missing.
    if (wanted && first !== wanted) ui.toast(`Bank "${wanted}" does not exist (any more); showing "${first}"`, 'error')
    selectBank(first, { fromHash: !wanted || first === wanted })
    if (!start) setView(root.classList.contains('mw-narrow') ? 'banks' : 'workspace')
  })

  return {
    dispose() {
      stopLive()
      resize.disconnect()
      doc.removeEventListener('keydown', onKey)
      clearInterval(clock)
      doc.removeEventListener('visibilitychange', retell)
      window.removeEventListener('beforeunload', onBeforeUnload)
      window.removeEventListener('hashchange', onHashChange)
      for (const panel of Object.values(panels)) panel.dispose?.()
      root.replaceChildren()
    },
    dirty,
  }
}

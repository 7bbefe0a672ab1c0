// DOM helpers for the console. The one rule: text from the server (memories, rules, names, error
// messages) only ever reaches the page as a Text node or `textContent`. Nothing in this console
// parses a string as HTML: there is no innerHTML, insertAdjacentHTML or document.write anywhere.

import { relativeTime } from './format.js'

/**
 * Create an element. `props`: class, text, title, attrs {name: value}, on {event: fn}, dataset,
 * and any direct property (type, value, checked, disabled, hidden, placeholder, …).
 * Children: nodes, or strings (which become Text nodes), or null/false (skipped), or arrays.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag)
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue
    if (key === 'class') el.className = value
    else if (key === 'text') el.textContent = String(value)
    else if (key === 'attrs') for (const [a, v] of Object.entries(value)) {
      if (v !== undefined && v !== null && v !== false) el.setAttribute(a, v === true ? '' : String(v))
    }
    else if (key === 'on') for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn)
    else if (key === 'dataset') Object.assign(el.dataset, value)
    else el[key] = value
  }
  append(el, children)
  return el
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue
    if (Array.isArray(child)) append(el, child)
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
}

/** Set an element's text, touching the DOM only when it changes (no needless reflow). */
export function setText(el, text) {
  const value = String(text ?? '')
  if (el.textContent !== value) el.textContent = value
}

/**
 * Show in `el` how long ago `ms` was ("3 minutes ago"), after `prefix`, and keep it true:
 * `retellTimes(root)` works every such element out again. Drawn once, "just now" stayed on a
 * page left open for hours (a quiet bank has no change to redraw it).
 */
export function setAgo(el, ms, prefix = '') {
  const known = typeof ms === 'number' && Number.isFinite(ms)
  if (known) Object.assign(el.dataset, { ago: String(ms), agoPrefix: prefix })
  else { delete el.dataset.ago; delete el.dataset.agoPrefix }
  setText(el, known ? `${prefix}${relativeTime(ms)}` : '')
}

export function retellTimes(root) {
  for (const el of root.querySelectorAll('[data-ago]')) {
    setText(el, `${el.dataset.agoPrefix ?? ''}${relativeTime(Number(el.dataset.ago))}`)
  }
}

/** Replace all children of `el` with `children` (nodes or strings). */
export function fill(el, ...children) {
  el.replaceChildren()
  append(el, children)
}

/**
 * Keyed reconciliation: make `container`'s children match `items`, reusing the node of every item
 * whose key was already shown (so a row being edited, its focus and its scroll position survive a
 * live refresh). `create(item)` builds a node; `update(node, item)` refreshes one in place.
 */
export function reconcile(container, items, key, create, update) {
  // A node moved (removed and inserted again) loses the focus it holds: the person typing in a
  // memory's edit box, or on a row's button, was left on <body>, their next keys going nowhere.
  const doc = container.ownerDocument
  const focused = container.contains(doc.activeElement) ? doc.activeElement : null
  const selection = focused && typeof focused.selectionStart === 'number'
    ? [focused.selectionStart, focused.selectionEnd, focused.selectionDirection] : null
  const existing = new Map()
  for (const node of container.children) if (node.dataset.key) existing.set(node.dataset.key, node)
  // The nodes that go, first: left in place until the end, one above the others made every node
  // below it move (each inserted before it), a row being edited with them.
  const wanted = new Set(items.map((item) => String(key(item))))
  for (const [id, node] of existing) {
    if (!wanted.has(id)) { node.remove(); existing.delete(id) }
  }
  let cursor = container.firstElementChild
  for (const item of items) {
    const id = String(key(item))
    let node = existing.get(id)
    if (node) {
      existing.delete(id)
      update(node, item)
    } else {
      node = create(item)
      node.dataset.key = id
    }
    if (node !== cursor) container.insertBefore(node, cursor)
    else cursor = cursor.nextElementSibling
  }
  for (const node of existing.values()) node.remove()
  // Still there but moved (a pinned or edited row goes to the top): the focus follows it.
  if (focused && focused.isConnected && container.contains(focused) && doc.activeElement !== focused) {
    focused.focus()
    if (selection) focused.setSelectionRange(...selection)
  }
}

let toastRegion = null

/** A short status message in a fixed overlay region (announced to screen readers). */
export function toast(root, message, kind = 'info') {
  if (!toastRegion || !root.contains(toastRegion)) {
    toastRegion = h('div', { class: 'mw-toasts', attrs: { role: 'status', 'aria-live': 'polite' } })
    root.append(toastRegion)
  }
  const item = h('div', { class: `mw-toast mw-toast-${kind}`, text: message })
  toastRegion.append(item)
  setTimeout(() => item.remove(), kind === 'error' ? 8000 : 3500)
}

/**
 * A modal confirmation on a native <dialog> (focus trapped, Esc cancels). Resolves true only when
 * the confirm button was pressed.
 */
export function confirmDialog(root, { title, body, confirm = 'Confirm', danger = false }) {
  return new Promise((resolve) => {
    const ok = h('button', { type: 'button', class: danger ? 'mw-btn mw-danger' : 'mw-btn mw-primary', text: confirm })
    const cancel = h('button', { type: 'button', class: 'mw-btn', text: 'Cancel' })
    const dialog = h('dialog', { class: 'mw-dialog', attrs: { 'aria-label': title } },
      h('h2', { class: 'mw-dialog-title', text: title }),
      ...(Array.isArray(body) ? body : [body]).map((line) => h('p', { text: line })),
      h('div', { class: 'mw-dialog-actions' }, cancel, ok))
    let answer = false
    ok.addEventListener('click', () => { answer = true; dialog.close() })
    cancel.addEventListener('click', () => dialog.close())
    dialog.addEventListener('close', () => { dialog.remove(); resolve(answer) })
    root.append(dialog)
    dialog.showModal()
    cancel.focus()
  })
}

/** A modal asking for one secret value (the access token). Resolves the text, or null. */
export function askDialog(root, { title, body, label, confirm = 'Continue' }) {
  return new Promise((resolve) => {
    const input = h('input', { type: 'password', class: 'mw-input', attrs: { 'aria-label': label, autocomplete: 'off' } })
    const ok = h('button', { type: 'submit', class: 'mw-btn mw-primary', text: confirm })
    const cancel = h('button', { type: 'button', class: 'mw-btn', text: 'Cancel' })
    const form = h('form', { method: 'dialog' },
      h('h2', { class: 'mw-dialog-title', text: title }),
      ...(Array.isArray(body) ? body : [body]).map((line) => h('p', { text: line })),
      h('label', { class: 'mw-field' }, h('span', { text: label }), input),
      h('div', { class: 'mw-dialog-actions' }, cancel, ok))
    const dialog = h('dialog', { class: 'mw-dialog', attrs: { 'aria-label': title } }, form)
    let answer = null
    form.addEventListener('submit', (event) => {
      event.preventDefault()
      answer = input.value.trim() || null
      dialog.close()
    })
    cancel.addEventListener('click', () => dialog.close())
    dialog.addEventListener('close', () => { dialog.remove(); resolve(answer) })
    root.append(dialog)
    dialog.showModal()
    input.focus()
  })
}

/**
 * After an action that disabled (or removed) the control it was started from, `pressed`: the
 * focus on it fell to <body>, and a keyboard user started again from the top of the page. It goes
 * back to `pressed` when that can take it again, else to `fallback`. Left alone when the person
 * has moved on meanwhile.
 */
export function keepFocus(pressed, fallback) {
  const doc = fallback.ownerDocument
  if (!pressed || ![doc.body, null, pressed].includes(doc.activeElement)) return
  // Hidden counts as gone: a notice's own buttons go with it.
  const usable = pressed.isConnected && !pressed.disabled && pressed.getClientRects().length > 0
  const target = usable ? pressed : fallback
  if (target.isConnected && target !== doc.activeElement) target.focus()
}

/** True when a key press happens while the person is typing in a field. */
export function typing(event) {
  const t = event.target
  return t instanceof HTMLElement && (t.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(t.tagName))
}

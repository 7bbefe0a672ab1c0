// Pure formatting: relative times, counts, scores, names. No DOM.

const UNITS = [
  ['year', 365 * 24 * 3600e3],
  ['month', 30 * 24 * 3600e3],
  ['week', 7 * 24 * 3600e3],
  ['day', 24 * 3600e3],
  ['hour', 3600e3],
  ['minute', 60e3],
]

/** "3 days ago", "in 2 hours", "just now". */
export function relativeTime(ms, now = Date.now()) {
  if (typeof ms !== 'number') return ''
  const diff = ms - now
  const abs = Math.abs(diff)
  if (abs < 45e3) return 'just now'
  const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' })
  for (const [unit, size] of UNITS) {
    if (abs >= size || unit === 'minute') return rtf.format(Math.round(diff / size), unit)
  }
  return ''
}

/** The moment as ISO 8601 (a <time>'s datetime), or null for one no Date can hold: timestamps are
 * u64 on disk, and `toISOString()` throws past year 275760, which would abort a whole list. */
export function isoTime(ms) {
  const date = new Date(ms)
  return typeof ms === 'number' && Number.isFinite(date.getTime()) ? date.toISOString() : null
}

/** The exact moment, for a tooltip. */
export function absoluteTime(ms) {
  return typeof ms === 'number' ? new Date(ms).toLocaleString() : ''
}

export function plural(n, one, many = `${one}s`) {
  return `${n.toLocaleString()} ${n === 1 ? one : many}`
}

export function score(value) {
  return typeof value === 'number' ? value.toFixed(value >= 10 ? 1 : 2) : ''
}

export const NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/

/** A typed name made valid for a bank or rule: lowercase, `-` for anything else, 64 chars. */
export function slugify(text) {
  return String(text).toLowerCase().normalize('NFKD').replace(/[\u0300-\u036f]/g, '')
    .replace(/[^a-z0-9_-]+/g, '-').replace(/^[-_]+/, '').replace(/-+$/, '').slice(0, 64)
}

/** A name as it is typed, key by key: lowercase, accents folded as `slugify` folds them ("ação" →
 * "acao"), `-` for anything else. Folded here, not only at submit: replaced first, each accented
 * letter was already a dash by then. */
export function typedName(text) {
  return String(text).toLowerCase().normalize('NFKD').replace(/[\u0300-\u036f]/g, '').replace(/[^a-z0-9_-]/g, '-')
}

/** `text` as a text box gives it back: its `value` turns `\r\n` and `\r` into `\n`, so a file
 * written with Windows line ends never compares equal to the box showing it. */
export function asTyped(text) {
  return String(text).replace(/\r\n?/g, '\n')
}

/** "a, b ,c" → ["a", "b", "c"]. */
export function splitList(text) {
  return String(text).split(',').map((part) => part.trim()).filter(Boolean)
}

/** The `code` and sentence of a worker error, from `{code, message}` or "code: sentence". */
export function errorParts(err) {
  if (err && typeof err === 'object' && typeof err.code === 'string') {
    return { code: err.code, message: err.message || err.code }
  }
  const text = String(err?.message ?? err ?? 'unknown error')
  const match = /^([a-z_]+): (.*)$/s.exec(text)
  return match ? { code: match[1], message: match[2] } : { code: 'error', message: text }
}

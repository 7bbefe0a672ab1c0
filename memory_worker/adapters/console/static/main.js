// Standalone home: the page the server itself serves at `/`. Every call is a same-origin POST
// with `Content-Type: application/json`; when the server asks for its access token (401), the page
// asks the person once and keeps it in sessionStorage (this tab only, never in a URL). The live
// stream is server-sent events read with fetch, so it carries the same headers.

import { mountConsole } from './app.js'
import { askDialog } from './dom.js'

const TOKEN_KEY = 'memory-worker.token'
const HEARTBEAT_GRACE_MS = 40000 // the server pings every 15 s: silence past this is a dead link
const RETRY_FIRST_MS = 2000
const RETRY_MAX_MS = 30000

const root = document.getElementById('memory-console')
let tokenPrompt = null
// Cancel pressed on the token prompt: not asked again until the page is reloaded. The calls in
// flight, the stream's every retry and every poll each asked anew, the prompt back within
// seconds however often it was dismissed.
let declined = false

function headers() {
  const out = { 'Content-Type': 'application/json' }
  const token = sessionStorage.getItem(TOKEN_KEY)
  if (token) out.Authorization = `Bearer ${token}`
  return out
}

/** Ask for the token once, however many calls were refused at the same time. */
function askToken(error) {
  if (declined) return Promise.resolve(null)
  if (!tokenPrompt) {
    tokenPrompt = askDialog(root, {
      title: 'This server needs its access token',
      body: [
        error?.message || 'The server refused the call without a valid token.',
        'It is in the data dir (shown by the server at start). It is kept for this tab only.',
      ],
      label: 'Access token',
    }).then((token) => {
      tokenPrompt = null
      if (token) sessionStorage.setItem(TOKEN_KEY, token)
      else declined = true
      return token
    })
  }
  return tokenPrompt
}

async function errorOf(response) {
  const body = await response.json().catch(() => null)
  return body?.error ?? { code: `http_${response.status}`, message: response.statusText || 'request failed' }
}

/** A refusal the person chose not to answer: it says how to be asked again. */
function unanswered(error) {
  return declined ? { ...error, message: `${error.message} (reload the page to enter the access token)` } : error
}

async function post(path, payload) {
  for (let attempt = 0; ; attempt += 1) {
    let response
    try {
      response = await fetch(path, {
        method: 'POST', headers: headers(), body: JSON.stringify(payload ?? {}),
        credentials: 'same-origin', cache: 'no-store', redirect: 'error',
      })
    } catch {
      throw { code: 'offline', message: 'the memory server does not answer' }
    }
    if (response.status === 401 && attempt < 3) {
      const error = await errorOf(response)
      sessionStorage.removeItem(TOKEN_KEY)
      if (await askToken(error)) continue
      throw unanswered(error)
    }
    if (!response.ok) throw await errorOf(response)
    return response.json()
  }
}

/** Server-sent events over a fetch body: `hello`, then one frame per change. */
function subscribe({ onEvent, onState }) {
  let stopped = false
  let controller = null
  let retry = RETRY_FIRST_MS
  const run = async () => {
    while (!stopped) {
      onState('connecting')
      controller = new AbortController()
      let watchdog = null
      const feed = () => {
        clearTimeout(watchdog)
        watchdog = setTimeout(() => controller.abort(), HEARTBEAT_GRACE_MS)
      }
      try {
        const response = await fetch('/console/events', {
          method: 'POST', headers: headers(), body: '{}', signal: controller.signal, cache: 'no-store',
        })
        if (response.status === 401) {
          const error = await errorOf(response)
          sessionStorage.removeItem(TOKEN_KEY)
          if (!(await askToken(error))) throw error
          continue
        }
        if (!response.ok || !response.body) throw await errorOf(response)
        feed()
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
        let buffer = ''
        for (;;) {
          const { value, done } = await reader.read()
          if (done) break
          feed()
          buffer += value
          let end
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const frame = buffer.slice(0, end)
            buffer = buffer.slice(end + 2)
            let event = 'message'
            const data = []
            for (const line of frame.split('\n')) {
              if (line.startsWith('event:')) event = line.slice(6).trim()
              else if (line.startsWith('data:')) data.push(line.slice(5).trimStart())
            }
            if (!data.length) continue
            if (event === 'hello') { retry = RETRY_FIRST_MS; onState('live'); continue }
            let payload = null
            try { payload = JSON.parse(data.join('\n')) } catch { continue }
            onEvent({ type: event, payload })
          }
        }
      } catch {
        // fall through: reconnect after a pause, polling meanwhile
      } finally {
        clearTimeout(watchdog)
      }
      if (stopped) break
      onState('down')
      await new Promise((resolve) => setTimeout(resolve, retry))
      retry = Math.min(retry * 2, RETRY_MAX_MS)
    }
  }
  run()
  return () => { stopped = true; controller?.abort() }
}

const transport = {
  home: 'standalone',
  call: (functionId, payload) => post(`/${functionId.replaceAll('::', '/')}`, payload),
  subscribe,
  settings: () => post('/console/settings', {}),
  // `revision`: the view's, so a save over a change made since this tab read it is refused.
  saveSettings: (values, revision) => post('/console/settings/set', revision ? { values, expected_revision: revision } : { values }),
}

const params = new URLSearchParams(location.search)
const pollMs = Number(params.get('poll_ms')) || undefined
mountConsole(root, { transport, pollMs })

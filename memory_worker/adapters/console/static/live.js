// Live updates, whichever home the page is in: the transport's event stream when it holds, a
// polling fallback while it does not. The indicator says which one is running, never guesses.

export const ITEM_CHANGED = 'memory::item-changed'
export const BANK_CHANGED = 'memory::bank-changed'
export const DEFAULT_POLL_MS = 15000 // the reference console's interval; skipped while hidden

/**
 * Start following changes. `onEvent({type, payload})` for each change, `onResync()` when what is
 * shown must be refetched (a poll tick, a reconnect, a lagging stream), `onMode(mode)` with
 * 'connecting' | 'live' | 'polling'. Returns stop().
 */
export function follow(transport, { onEvent, onResync, onMode, pollMs = DEFAULT_POLL_MS }) {
  let mode = null
  let timer = null
  let stopped = false
  const setMode = (next) => {
    if (next === mode) return
    const wasLive = mode === 'live'
    mode = next
    onMode(next)
    if (next === 'polling') startPolling()
    else stopPolling()
    // Back from a gap: whatever changed meanwhile was not streamed to us.
    if (next === 'live' && !wasLive) onResync()
    // The stream just dropped: asked again now, not at the first tick 15 s on, which also finds
    // out at once whether the server still answers (a restart) or only the stream is gone.
    if (next === 'polling' && wasLive) onResync()
  }
  const tick = () => {
    if (stopped) return
    if (typeof document === 'undefined' || !document.hidden) onResync()
  }
  const startPolling = () => {
    if (timer === null) timer = setInterval(tick, pollMs)
  }
  const stopPolling = () => {
    if (timer !== null) clearInterval(timer)
    timer = null
  }
  setMode('connecting')
  const unsubscribe = transport.subscribe({
    onEvent: (event) => {
      if (event.type === 'resync') onResync()
      else onEvent(event)
    },
    onState: (state) => {
      if (stopped) return
      // A reconnection failed again while polling: asked again now too, so a server that
      // stopped is found out (said offline) at the stream's retry, not at the next 15 s tick;
      // the refetch made when the stream dropped may have met the server still shutting down.
      if (state === 'down' && mode === 'polling') onResync()
      setMode(state === 'live' ? 'live' : state === 'connecting' && mode !== 'polling' ? 'connecting' : 'polling')
    },
  })
  return () => {
    stopped = true
    stopPolling()
    unsubscribe()
  }
}

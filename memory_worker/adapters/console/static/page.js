// iii console home: the `console:script` asset. The console imports this module and calls
// `setup(host)`; it registers the Memory page (#/ext/memory), which mounts the same console as the
// standalone server, with a transport over the tab's bus client: calls are `host.iii.trigger`,
// changes arrive through bindings on `memory::item-changed` / `memory::bank-changed` to tab-scoped
// handlers (GC'd with the tab), and the connection state drives the live/polling indicator.
// `react` resolves through the console's import map; nothing else here is React.

import { createElement, useEffect, useRef } from 'react'
import { mountConsole } from './app.js'
import { BANK_CHANGED, ITEM_CHANGED } from './live.js'

export function busTransport(host) {
  const iii = host.iii
  return {
    home: 'iii',
    async call(functionId, payload) {
      try {
        return await iii.trigger(functionId, payload ?? {})
      } catch (err) {
        throw { message: String(err?.message ?? err) } // "code: sentence", parsed by the page
      }
    },
    subscribe({ onEvent, onState }) {
      const browser = iii.browserId ?? Math.random().toString(36).slice(2)
      const undo = []
      for (const [type, kind] of [[ITEM_CHANGED, 'items'], [BANK_CHANGED, 'banks']]) {
        // The `iii::` prefix keeps these per-event invocations out of the trace feed.
        const handler = `iii::memory-ui::${kind}::${browser}`
        undo.push(iii.on(handler, (payload) => { onEvent({ type, payload }); return null }))
        try {
          undo.push(iii.registerTrigger({ type, function_id: handler, config: {} }))
        } catch {
          onState('down')
        }
      }
      const listen = iii.addConnectionStateListener?.((state) => onState(state === 'connected' ? 'live' : 'down'))
      if (listen) undo.push(listen)
      onState(iii.connectionState === undefined || iii.connectionState === 'connected' ? 'live' : 'down')
      return () => { for (const fn of undo) if (typeof fn === 'function') fn() }
    },
    settings: () => iii.trigger('memory::ui-settings', {}),
    saveSettings: null,
  }
}

function MemoryPage({ host, setDirty }) {
  const ref = useRef(null)
  useEffect(() => {
    const app = mountConsole(ref.current, {
      transport: busTransport(host),
      onDirty: (dirty) => setDirty?.(dirty ? 'memory' : false),
    })
    return () => app.dispose()
  }, [])
  return createElement('div', { ref, className: 'mw-host' })
}

export default function setup(host) {
  host.pages.register({
    id: 'memory',
    title: 'Memory',
    render: (props = {}) => createElement(MemoryPage, { host, setDirty: props.setDirty }),
  })
}

// Small DOM helpers of the /ui page. Text is always set with textContent (never
// innerHTML): run keys, tool, service and agent names come from spans.

/** Creates `tag` with attributes `attrs` and children (nodes or text). */
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

/** Sets a node's text only when it changed (no needless layout, selection kept). */
export function setText(node, text) {
  const s = String(text);
  if (node.textContent !== s) node.textContent = s;
}

/** Sets (or, for null/undefined, removes) an attribute only when it changed. */
export function setAttr(node, name, value) {
  if (value === null || value === undefined) {
    if (node.hasAttribute(name)) node.removeAttribute(name);
  } else if (node.getAttribute(name) !== String(value)) {
    node.setAttribute(name, value);
  }
}

/**
 * Makes `parent`'s children match `items` in order, keyed by `key(item)`: existing
 * children are updated in place with `update(node, item)` and moved only when out of
 * place, new ones come from `create(item)`, and children of keys no longer listed go. So
 * a poll never rebuilds a list: scroll position, focus and text selection survive.
 */
export function syncChildren(parent, items, key, create, update) {
  const existing = new Map();
  for (const child of parent.children) existing.set(child.dataset.key, child);
  let cursor = parent.firstElementChild;
  for (const item of items) {
    const k = String(key(item));
    let node = existing.get(k);
    if (node) existing.delete(k);
    else {
      node = create(item);
      node.dataset.key = k;
    }
    update(node, item);
    if (node === cursor) cursor = cursor.nextElementSibling;
    else parent.insertBefore(node, cursor);
  }
  for (const node of existing.values()) node.remove();
}

/** `x` (0..1) as a percentage with one decimal. */
export function pct(x) { return (100 * x).toFixed(1) + " %"; }

/** A duration in seconds, short: "42 s", "3 min", "2.1 h". */
export function ago(seconds) {
  if (seconds < 90) return seconds.toFixed(0) + " s";
  if (seconds < 5400) return (seconds / 60).toFixed(0) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

/** Local wall-clock time (HH:MM:SS) of a time in ns since the Unix epoch. */
export function clock(unixNano) {
  return new Date(unixNano / 1e6).toLocaleTimeString([], { hour12: false });
}

/** A fingerprint chip: the short id, tinted by its value so equal ids look alike. */
export function setFingerprint(node, fp, missing) {
  if (!fp) {
    setText(node, missing);
    setAttr(node, "class", "fp none");
    node.style.removeProperty("--fp-hue");
    return;
  }
  setText(node, fp);
  setAttr(node, "class", "fp");
  node.style.setProperty("--fp-hue", String(parseInt(fp.slice(0, 6), 16) % 360));
}

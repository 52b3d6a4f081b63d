// Package browser holds the browser test of package ui: a headless Chromium,
// driven by chromedp, clicks through the web UI the way an on-call engineer
// does (find a failed run, look at its timeline, requeue it with a note,
// spot a workflow no worker serves, requeue payments whose at-most-once
// attempt was lost only once they are checked, requeue an incident of
// 10,000 failures and purge old ones, see what each queued run waits for)
// against a real worker on a real PostgreSQL schema, and saves a screenshot
// of every page to docs/ui. It checks what a reader sees: at 1280×800 no
// page scrolls sideways, in read-only or write mode, and no chart label is
// cut; run IDs take one short line and copy whole; the pages follow a dark
// colour scheme; the timeline's legend shows the timeline's colours; token
// guesses are throttled and other host names refused with the flag named.
//
// It is a module of its own so that chromedp is never a requirement of the
// core module (internal/coremodule). Its test needs Chromium: on Debian,
// apt-get install -y chromium chromium-driver ($CHROMIUM names another
// binary). A machine without it fails the test, saying so; it never skips.
package browser

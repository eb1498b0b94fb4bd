// Prints the http-cache-tests test definitions run.py classifies results by:
// one JSON array of {suite, id, name, kind, depends_on, browser_only,
// browser_skip, requests}, in the order the suite's CLI (cli.mjs) runs them:
// the suites of tests/index.mjs, then surrogate-control.mjs, which cli.mjs
// appends. Of each request only what decides how the client judges its
// status: expected_type, setup, setup_tests, and whether expected_status or
// response_status is set.
import tests from './node_modules/http-cache-tests/tests/index.mjs'
import surrogate from './node_modules/http-cache-tests/tests/surrogate-control.mjs'

const out = []
for (const suite of [...tests, surrogate]) {
  for (const test of suite.tests) {
    out.push({
      suite: suite.id,
      id: test.id,
      name: test.name,
      kind: test.kind === undefined ? null : test.kind,
      depends_on: test.depends_on || [],
      browser_only: test.browser_only === true,
      browser_skip: test.browser_skip === true,
      requests: test.requests.map(req => ({
        expected_type: req.expected_type || null,
        setup: req.setup === true,
        setup_tests: req.setup_tests || [],
        status_set: 'expected_status' in req || 'response_status' in req
      }))
    })
  }
}
process.stdout.write(JSON.stringify(out))

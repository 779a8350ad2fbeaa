import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allValues, dashboardQueries, judge, substitute } from './dashboard-queries.mjs';

test('substitute replaces bare, braced and formatted variables', () => {
  const values = { model: '.*', __rate_interval: '2m' };
  const table = [
    ['rate(x{model=~"$model"}[$__rate_interval])', 'rate(x{model=~".*"}[2m])'],
    ['rate(x{model=~"${model}"}[${__rate_interval}])', 'rate(x{model=~".*"}[2m])'],
    ['x{model=~"${model:regex}"}', 'x{model=~".*"}'],
    ['sum(x)', 'sum(x)'],
  ];
  for (const [expr, expected] of table) assert.equal(substitute(expr, values), expected);
});

test('substitute refuses a variable it has no value for', () => {
  assert.throws(() => substitute('x{worker=~"$worker"}', { model: '.*' }), /\$worker/);
});

test('dashboardQueries walks nested panels, skips hidden and empty targets', () => {
  const dashboard = {
    panels: [
      {
        title: 'A',
        targets: [
          { refId: 'A', expr: 'sum(rate(a[$__rate_interval]))' },
          { refId: 'B', expr: '', hide: false },
        ],
      },
      {
        title: 'Row',
        type: 'row',
        panels: [
          {
            title: 'B',
            targets: [
              { refId: 'A', expr: 'b{m=~"$model"}', legendFormat: '{{m}}' },
              { refId: 'B', expr: 'c', hide: true },
            ],
          },
        ],
      },
      { title: 'Text', type: 'text' },
    ],
  };
  const queries = dashboardQueries(dashboard, { variables: { model: '.*' }, macros: { __rate_interval: '1m' } });
  assert.deepEqual(
    queries.map((q) => [q.panel, q.refId, q.query]),
    [
      ['A', 'A', 'sum(rate(a[1m]))'],
      ['B', 'A', 'b{m=~".*"}'],
    ],
  );
});

test('allValues takes each query variable\'s allValue and refuses one without "All"', () => {
  const list = [
    { name: 'DS_PROMETHEUS', type: 'datasource' },
    { name: 'model', type: 'query', includeAll: true, allValue: '.*' },
    { name: 'worker', type: 'query', includeAll: true },
  ];
  assert.deepEqual(allValues({ templating: { list } }), { model: '.*', worker: '.*' });
  assert.throws(
    () => allValues({ templating: { list: [{ name: 'x', type: 'query', includeAll: false }] } }),
    /x has no "All"/,
  );
});

test('judge: data only when a sample has a finite value', () => {
  const vector = (...values) => ({
    status: 'success',
    data: { resultType: 'vector', result: values.map(([labels, v]) => ({ metric: labels, value: [1, v] })) },
  });
  const table = [
    [vector(), false, 'no series'],
    [vector([{}, 'NaN'], [{ model: 'a' }, 'NaN']), false, '2 series, none finite (NaN or ±Inf)'],
    [vector([{}, '0']), true, '0'],
    [vector([{ model: 'a' }, '0.25'], [{ model: 'b', __name__: 'x' }, '1.5'], [{}, 'NaN']), true, '1.5 (model=b)'],
    [vector([{}, '+Inf']), false, '1 series, none finite (NaN or ±Inf)'],
    [{ status: 'success', data: { resultType: 'scalar', result: [1, '3'] } }, true, '3'],
    [{ status: 'error', errorType: 'bad_data', error: 'parse error' }, false, 'error: bad_data: parse error'],
  ];
  for (const [body, data, shown] of table) {
    const verdict = judge(body);
    assert.equal(verdict.data, data, JSON.stringify(body));
    assert.equal(verdict.shown, shown, JSON.stringify(body));
  }
});

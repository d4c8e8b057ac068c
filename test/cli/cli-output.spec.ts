import { describe, expect, it } from '@jest/globals';
import { SecretMask, formatTable, wantsColor } from '../../lib/cli/cli-output.js';
import { formatDuration } from '../../lib/cli/durations.js';

describe('SecretMask', () => {
  const mask = new SecretMask();
  mask.addUrl('redis://admin:s3cr%40t%2Fpw@10.0.0.1:6379');
  mask.addUrl('redis://10.0.0.2:6379?password=query-secret');

  it('hides the password of every URL in a text, keeping the user and the host', () => {
    expect(mask.mask('got redis://admin:other@h:1,rediss://:x@h:2 and http://u:p@h')).toBe(
      'got redis://admin:***@h:1,rediss://:***@h:2 and http://u:***@h',
    );
  });

  it('hides a password parameter of a URL', () => {
    expect(mask.mask("'redis://h:1?db=2&password=abc&x=1'")).toBe(
      "'redis://h:1?db=2&password=***&x=1'",
    );
  });

  it('hides the passwords it was given wherever they appear, encoded or not', () => {
    expect(mask.mask('auth s3cr@t/pw failed; s3cr%40t%2Fpw; query-secret')).toBe(
      'auth *** failed; ***; ***',
    );
  });

  it('leaves a URL without a password alone', () => {
    expect(mask.mask('redis://127.0.0.1:6379/0 and user@example.com')).toBe(
      'redis://127.0.0.1:6379/0 and user@example.com',
    );
  });
});

describe('tables', () => {
  it('pads every column to its widest cell, right-aligns numbers and leaves no trailing blanks', () => {
    expect(
      formatTable(
        [{ title: 'NODE' }, { title: 'FENCE', align: 'right' }, { title: 'NOTE' }],
        [
          ['127.0.0.1:6379', '17', ''],
          ['h:1', '1024', { text: 'down', tone: 'bad' }],
        ],
      ),
    ).toBe(
      ['NODE            FENCE  NOTE', '127.0.0.1:6379     17', 'h:1              1024  down'].join(
        '\n',
      ),
    );
  });

  it('colours after padding, so colour never skews the alignment', () => {
    const plain = formatTable(
      [{ title: 'A' }, { title: 'B' }],
      [[{ text: 'up', tone: 'good' }, 'x']],
    );
    const coloured = formatTable(
      [{ title: 'A' }, { title: 'B' }],
      [[{ text: 'up', tone: 'good' }, 'x']],
      true,
    );
    // eslint-disable-next-line no-control-regex
    expect(coloured.replace(/\u001b\[\d+m/g, '')).toBe(plain);
    expect(coloured).toContain('\u001b[32mup\u001b[39m');
  });
});

describe('colour', () => {
  it('is on for a terminal only, and off with NO_COLOR set or a dumb terminal', () => {
    expect(wantsColor({ write: () => true, isTTY: true }, {})).toBe(true);
    expect(wantsColor({ write: () => true }, {})).toBe(false);
    expect(wantsColor({ write: () => true, isTTY: true }, { NO_COLOR: '1' })).toBe(false);
    expect(wantsColor({ write: () => true, isTTY: true }, { NO_COLOR: '' })).toBe(true);
    expect(wantsColor({ write: () => true, isTTY: true }, { TERM: 'dumb' })).toBe(false);
  });
});

describe('durations', () => {
  it.each([
    [850, '850 ms'],
    [4_870, '4.8 s'],
    [59_999, '59.9 s'],
    [725_000, '12 min 5 s'],
    [7_500_000, '2 h 5 min'],
  ])('%i ms reads %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

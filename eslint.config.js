import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', 'node_modules/**', '.cortex/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // No consistent-type-imports: Nest reads constructor parameter types at run time
      // (emitDecoratorMetadata), so an injected class must stay a value import.
      // Apps and tests use libraries through their @cortex/<lib> entry, never deep paths.
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['@cortex/*/*'], message: 'import from the @cortex/<lib> entry point' },
            { group: ['**/libs/**'], message: 'use @cortex/<lib>' },
          ],
        },
      ],
    },
  },
  {
    // Prettier wraps code at 120 columns but leaves strings, template literals and comments whole: split a long string
    // into pieces joined with + (the same characters) and rewrap a long comment. A URL or a regular expression may run
    // past the limit; anything else that must stay whole says why in an eslint-disable comment.
    files: ['apps/**/*.ts', 'libs/**/*.ts'],
    rules: {
      'max-len': ['error', { code: 140, ignoreUrls: true, ignoreRegExpLiterals: true }],
    },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        fetch: 'readonly',
        AbortController: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
      },
    },
  },
);

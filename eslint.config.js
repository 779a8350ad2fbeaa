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

/** Stop triggers that are plain text (strings, or LlamaText/arrays of strings only); token triggers are skipped. */
export function stopTexts(triggers: readonly unknown[]): string[] {
  const texts: string[] = [];
  for (const trigger of triggers) {
    const values: readonly unknown[] =
      typeof trigger === 'string'
        ? [trigger]
        : Array.isArray(trigger)
          ? trigger
          : ((trigger as { values?: readonly unknown[] }).values ?? []);
    if (values.length > 0 && values.every((value) => typeof value === 'string')) {
      const text = values.join('');
      if (text) texts.push(text);
    }
  }
  return texts;
}

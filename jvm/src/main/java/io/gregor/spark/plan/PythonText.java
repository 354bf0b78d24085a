package io.gregor.spark.plan;

import java.util.List;
import java.util.stream.Collectors;

/**
 * Values spelled as the Python source's messages spell them (repr), so that an error reads the
 * same whichever path of the source ran the query.
 */
final class PythonText {
  private PythonText() {}

  /** Python's repr of a str: single quotes unless the text holds one and no double quote. */
  static String repr(String text) {
    char quote = text.indexOf('\'') >= 0 && text.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder out = new StringBuilder(text.length() + 2).append(quote);
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == quote || c == '\\') {
        out.append('\\').append(c);
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\t') {
        out.append("\\t");
      } else if (c == '\r') {
        out.append("\\r");
      } else if (c < 0x20 || c == 0x7f) {
        out.append(String.format("\\x%02x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append(quote).toString();
  }

  /** Python's repr of a list of str. */
  static String repr(List<String> items) {
    return items.stream().map(PythonText::repr).collect(Collectors.joining(", ", "[", "]"));
  }
}

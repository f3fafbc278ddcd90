/* placeholder while the module is written */ typedef int gl_placeholder_textstream;

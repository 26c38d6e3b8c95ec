{
  # Built at install (`npm install` runs `node-gyp rebuild` here): the keeper that runs every
  # command of the server (an executable), and the small addon the server loads itself.
  'targets': [
    {
      'target_name': 'tether_native',
      'sources': ['addon.c'],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-Wno-unused-parameter'],
      'xcode_settings': {'OTHER_CFLAGS': ['-std=gnu11']},
    },
    {
      'target_name': 'tether-keeper',
      'type': 'executable',
      'sources': ['keeper.c'],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-Wno-unused-parameter'],
      # Static where the C library allows it: no dynamic loader on every process start.
      'conditions': [['OS=="linux"', {'ldflags': ['<!@(sh ./static-ldflags.sh)']}]],
      'xcode_settings': {'OTHER_CFLAGS': ['-std=gnu11']},
    },
  ],
}

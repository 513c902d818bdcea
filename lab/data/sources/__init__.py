"""Where text comes from and how it is read: pinned packages fetched and verified into the cache (packages),
the user's files read exactly as their formats say with a report of what was done (reading), text files as a
stream of decoded chunks in bounded memory (stream), and the one normalisation training and inference share
(text)."""

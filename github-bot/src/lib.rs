//! glassbox-github-bot

// glassbox saved views: the "copy link" button of the experiments list copies the absolute URL
// of the view (search, columns, sort). Served from /assets/view.js so the page's
// Content-Security-Policy can forbid inline script. Without it the link beside it still works.
(function () {
  'use strict';
  var button = document.getElementById('copy-view');
  if (!button) { return; }
  button.addEventListener('click', function () {
    var input = document.getElementById(button.dataset.copy);
    if (!input) { return; }
    var url = window.location.origin + input.value;
    input.value = url;
    input.select();
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(url).then(function () { button.textContent = 'copied'; },
        function () { button.textContent = 'select and copy'; });
    } else {
      button.textContent = 'select and copy';
    }
  });
}());
